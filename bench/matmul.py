"""PyTorch counterpart of bench_matmul: the same shapes in fp16 and bf16 (tensor cores,
fp32 accumulation) and fp32 (TF32 off), timed with CUDA events. One JSON line per (shape, dtype).

Usage: python3 bench/matmul.py [--shapes square|training|prefill|step8|small|all|MxKxN,...] [--reps N]
"""
import argparse
import json

import torch


def given_shapes(which):
    """"MxKxN[,MxKxN...]" as bench_matmul takes it (tag "given"); None if `which` is not one."""
    s = []
    for item in which.split(","):
        d = item.split("x")
        if len(d) != 3 or not all(v.isdigit() and int(v) > 0 for v in d):
            return None
        s.append((int(d[0]), int(d[1]), int(d[2]), "given"))
    return s


def shapes(which):
    given = given_shapes(which)
    if given:
        return given
    s = []
    if which in ("square", "all"):
        s += [(v, v, v, "square") for v in (1024, 2048, 4096, 8192)]
    if which in ("training", "all"):
        s += [(256, 576, 1536, "training"), (256, 1536, 576, "training"),
              (256, 576, 49152, "training"), (64, 784, 128, "training"),
              (256, 576, 576, "training"), (576, 256, 576, "training"),
              (576, 256, 1536, "training")]
    if which in ("prefill", "all"):
        # SmolLM2-135M prefilling 512 tokens: q and o, k and v, gate and up, down projections.
        s += [(512, 576, 576, "prefill"), (512, 576, 192, "prefill"), (512, 576, 1536, "prefill"),
              (512, 1536, 576, "prefill")]
    if which in ("step8", "all"):
        # SmolLM2-135M's training step at 8 x 512: projections forward, then weight gradients.
        s += [(4096, k, n, "step8") for k, n in ((576, 576), (576, 192), (576, 1536), (1536, 576),
                                                 (576, 49152))]
        s += [(m, 4096, n, "step8") for m, n in ((576, 576), (192, 576), (1536, 576), (576, 1536))]
    if which in ("small", "all"):
        s += [(v, v, v, "small") for v in (32, 64, 128, 256, 512)]
        s += [(64, 64, 4096, "small"), (16, 1024, 1024, "small")]
    return s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="all")
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    if not shapes(args.shapes):
        p.error("--shapes takes square, training, prefill, step8, small, all or MxKxN,... got " +
                args.shapes)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    for m, k, n, tag in shapes(args.shapes):
        for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16"), (torch.float32, "fp32")):
            a = torch.rand(m, k, device=dev, dtype=dtype) * 2 - 1
            b = torch.rand(k, n, device=dev, dtype=dtype) * 2 - 1
            for _ in range(3):
                c = a @ b
            times = []
            if dev == "cuda":
                torch.cuda.synchronize()
                for _ in range(args.reps):
                    s = torch.cuda.Event(enable_timing=True)
                    e = torch.cuda.Event(enable_timing=True)
                    s.record()
                    c = a @ b
                    e.record()
                    e.synchronize()
                    times.append(s.elapsed_time(e))
            else:
                import time
                for _ in range(max(1, args.reps // 10)):
                    t0 = time.perf_counter()
                    c = a @ b
                    times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            t = times[len(times) // 2]
            print(json.dumps({"bench": "matmul", "framework": "pytorch", "m": m, "k": k, "n": n,
                              "tag": tag, "path": name, "ms_median": t,
                              "tflops": 2.0 * m * n * k / (t * 1e-3) / 1e12,
                              "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}),
                  flush=True)
            del a, b, c


if __name__ == "__main__":
    main()
