"""PyTorch counterpart of bench_conv: ResNet-50's distinct conv layers (the table in
bench/conv.cpp) at batch 32, forward (F.conv2d), input gradient and weight gradient
(aten.convolution_backward with one output mask each), through cuDNN, timed with CUDA events.
One JSON line per (layer, dir, path); path is fp32 (TF32 off), tf32 or fp16, with
"channels_last" true when --channels-last is given (NHWC memory, cuDNN's tensor-core layout).

--ours FILE reads bench_conv's JSON lines and adds, per line of ours, a "compare" line with our
TFLOP/s over PyTorch's for each of its paths (ratio = ours / theirs).

Usage: /usr/bin/python3 bench/conv.py [--small] [--batch N] [--layers a,b] [--dirs ...]
                                      [--paths fp32,tf32,fp16] [--reps N] [--channels-last]
                                      [--ours ours.jsonl]
"""
import argparse
import json
import time

import torch

# name, C, O, k, stride, pad, H (square images and kernels)
LAYERS = [
    ("conv1", 3, 64, 7, 2, 3, 224),
    ("l1_1x1_64", 64, 64, 1, 1, 0, 56),
    ("l1_3x3", 64, 64, 3, 1, 1, 56),
    ("l1_1x1_up", 64, 256, 1, 1, 0, 56),
    ("l1_1x1_down", 256, 64, 1, 1, 0, 56),
    ("l2_3x3_s2", 128, 128, 3, 2, 1, 56),
    ("l2_ds", 256, 512, 1, 2, 0, 56),
    ("l2_3x3", 128, 128, 3, 1, 1, 28),
    ("l2_1x1_down", 512, 128, 1, 1, 0, 28),
    ("l2_1x1_up", 128, 512, 1, 1, 0, 28),
    ("l3_3x3", 256, 256, 3, 1, 1, 14),
    ("l3_1x1_down", 1024, 256, 1, 1, 0, 14),
    ("l3_1x1_up", 256, 1024, 1, 1, 0, 14),
    ("l4_3x3", 512, 512, 3, 1, 1, 7),
    ("l4_1x1_down", 2048, 512, 1, 1, 0, 7),
    ("l4_1x1_up", 512, 2048, 1, 1, 0, 7),
]


def out_size(h, k, s, p):
    return (h + 2 * p - k) // s + 1


def time_ms(fn, dev, reps):
    for _ in range(3):
        fn()
    times = []
    if dev == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--small", action="store_true", help="batch 1, images a quarter the size")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--layers", default="")
    p.add_argument("--dirs", default="forward,grad_input,grad_weight")
    p.add_argument("--paths", default="fp32,tf32,fp16")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--ours", default=None, help="bench_conv output to compare with")
    args = p.parse_args()
    batch = args.batch if args.batch is not None else (1 if args.small else 32)
    scale = 4 if args.small else 1
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    reps = args.reps if args.reps is not None else (50 if dev == "cuda" else 2)
    wanted = set(filter(None, args.layers.split(",")))
    dirs = list(filter(None, args.dirs.split(",")))
    paths = list(filter(None, args.paths.split(",")))
    torch.backends.cudnn.benchmark = True
    device_name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    theirs = {}

    for name, c, o, k, s, pad, h in LAYERS:
        if wanted and name not in wanted:
            continue
        h = max(h // scale, k)
        oh = out_size(h, k, s, pad)
        flops = 2.0 * batch * o * oh * oh * c * k * k
        for path in paths:
            if dev == "cpu" and path == "fp16":
                continue  # no half convolutions on the CPU
            dtype = torch.float16 if path == "fp16" else torch.float32
            torch.backends.cudnn.allow_tf32 = path == "tf32"
            fmt = torch.channels_last if args.channels_last else torch.contiguous_format
            x = (torch.rand(batch, c, h, h, device=dev, dtype=dtype) * 2 - 1).to(memory_format=fmt)
            w = (torch.rand(o, c, k, k, device=dev, dtype=dtype) * 2 - 1).to(memory_format=fmt)
            gy = (torch.rand(batch, o, oh, oh, device=dev, dtype=dtype) * 2 - 1).to(
                memory_format=fmt)
            stride, padding, dilation = [s, s], [pad, pad], [1, 1]

            def backward(mask):
                return torch.ops.aten.convolution_backward(
                    gy, x, w, None, stride, padding, dilation, False, [0, 0], 1, mask)

            fns = {
                "forward": lambda: torch.nn.functional.conv2d(x, w, None, stride, padding),
                "grad_input": lambda: backward([True, False, False]),
                "grad_weight": lambda: backward([False, True, False]),
            }
            for d in dirs:
                with torch.no_grad():
                    t = time_ms(fns[d], dev, reps)
                tflops = flops / (t * 1e-3) / 1e12
                theirs[(name, d, path)] = tflops
                print(json.dumps({"bench": "conv", "framework": "pytorch", "layer": name,
                                  "dir": d, "path": path, "channels_last": args.channels_last,
                                  "batch": batch, "c": c, "o": o, "k": k, "stride": s,
                                  "pad": pad, "h": h, "oh": oh, "ms_median": t,
                                  "tflops": tflops, "device": device_name}), flush=True)
            del x, w, gy

    if args.ours:
        with open(args.ours) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if r.get("bench") != "conv" or "layer" not in r or "framework" in r:
                    continue
                out = {"bench": "conv", "compare": True, "layer": r["layer"], "dir": r["dir"],
                       "path": r["path"], "ours_tflops": r["tflops"]}
                for path in paths:
                    t = theirs.get((r["layer"], r["dir"], path))
                    if t:
                        out["pytorch_" + path + "_tflops"] = t
                        out["ratio_" + path] = r["tflops"] / t
                print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
