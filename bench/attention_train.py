"""PyTorch counterpart of bench_attention_train: F.scaled_dot_product_attention forward and
backward (fp32, is_causal, enable_gqa: 9 query heads over 3 key/value heads) with a given dout,
timed with CUDA events (median of --reps after warm-up). "tflops" counts forward + backward as
3.5 times the forward's 4·B·Hq·L²·D, halved for causal (FlashAttention's convention);
"peak_mib" is torch.cuda.max_memory_allocated during one step (inputs included). fp32 has no
flash backend in PyTorch: the default selection (memory-efficient attention) runs, and
"backend" says which one was allowed.

--forward times the forward alone (no autograd). --dtype fp32|fp16|bf16: q, k, v and dout in
that dtype (the counterpart of bench_attention_train --dtype); with fp16 or bf16 the default
selection runs the flash backend, forward and backward.

Usage: /usr/bin/python3 bench/attention_train.py [--batch N] [--lengths 512,2048]
                                                 [--dims 64,128] [--reps N]
                                                 [--backend default|efficient|math|flash]
                                                 [--forward] [--dtype fp32|fp16|bf16]
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "math": [SDPBackend.MATH],
    "flash": [SDPBackend.FLASH_ATTENTION],
}


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def run_case(args, length, dim, device):
    b, hq, hkv = args.batch, 9, 3
    dtype = DTYPES[args.dtype]
    gen = torch.Generator(device=device).manual_seed(0)
    grad = not args.forward

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=gen).to(dtype).requires_grad_(grad)

    q, k, v = randn(b, hq, length, dim), randn(b, hkv, length, dim), randn(b, hkv, length, dim)
    if grad:
        dout = torch.randn(b, hq, length, dim, device=device, generator=gen).to(dtype)

    def step():
        if args.forward:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        torch.autograd.grad(out, (q, k, v), dout)

    def timed():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        return times[len(times) // 2], torch.cuda.max_memory_allocated()

    if args.backend == "default":
        ms, peak = timed()
    else:
        with sdpa_kernel(BACKENDS[args.backend]):
            ms, peak = timed()
    forward_flops = 4.0 * b * hq * length * length * dim * 0.5
    flops = forward_flops if args.forward else 3.5 * forward_flops
    print(json.dumps({"case": "attention_forward" if args.forward else "attention_train",
                      "framework": "pytorch", "dtype": args.dtype,
                      "causal": True, "batch": b, "heads": hq, "kv_heads": hkv,
                      "length": length, "head_dim": dim, "backend": args.backend,
                      "gpu_ms_median": ms, "tflops": flops / (ms * 1e-3) / 1e12,
                      "peak_mib": peak / 2**20, "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lengths", default="512,2048")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--backend", default="default", choices=["default", *BACKENDS])
    p.add_argument("--forward", action="store_true")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    for length in [int(x) for x in args.lengths.split(",")]:
        for dim in [int(x) for x in args.dims.split(",")]:
            run_case(args, length, dim, "cuda")


if __name__ == "__main__":
    main()
