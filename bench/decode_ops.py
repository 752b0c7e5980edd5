"""PyTorch counterpart of bench_decode_ops: one decoding step's attention over a KV cache and
its token sampling, timed with CUDA events (median of --reps after warm-up).

attention: F.scaled_dot_product_attention of one query per sequence (32 query heads, 8
key/value heads of 64, or --heads HQ,HKV; f16, enable_gqa) over the cache's first position + 1 slots, as
transformers' static cache decodes (the cache sliced to the visible length).
sample: Hugging Face's warpers on f16 logits [batch, 151936] (temperature, top-k as
`scores < topk(...)[..., -1]`, top-p by sort and cumsum), softmax and torch.multinomial; greedy
is argmax.

Usage: /usr/bin/python3 bench/decode_ops.py [--batch N] [--heads HQ,HKV] [--cache T] [--reps N]
                                           [--cases attention|sample|all] [--small]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def time_ms(fn, reps, warm_ms=300):
    # Steps run for warm_ms first, as bench_decode_ops does, so that the clocks have risen.
    torch.cuda.synchronize()
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < warm_ms:
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def attention_cases(args, device):
    hq, hkv, d = args.hq, args.hkv, 64
    q = torch.randn(args.batch, hq, 1, d, device=device, dtype=torch.float16)
    k = torch.randn(args.batch, hkv, args.cache, d, device=device, dtype=torch.float16)
    v = torch.randn(args.batch, hkv, args.cache, d, device=device, dtype=torch.float16)
    for position in sorted({0, 255, args.cache // 4 - 1, args.cache - 1}):
        n = position + 1

        def step():
            F.scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n], enable_gqa=True)

        print(json.dumps({"case": "attention", "batch": args.batch, "cache": args.cache,
                          "position": position, "heads": [hq, hkv],
                          "gpu_ms_median": time_ms(step, args.reps),
                          "device": torch.cuda.get_device_name()}))


def warp(scores, temperature, top_k, top_p):
    scores = scores / temperature
    if top_k > 0:
        kth = torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = 0
        remove = remove.scatter(1, sorted_indices, remove)
        scores = scores.masked_fill(remove, -float("inf"))
    return scores


def sample_cases(args, device):
    logits = (torch.rand(args.batch, args.vocab, device=device) * 16 - 8).to(torch.float16)
    cases = [("greedy", 0.0, 0, 1.0), ("top_k_top_p", 0.8, 50, 0.95), ("top_p", 1.0, 0, 0.95)]
    for name, temperature, top_k, top_p in cases:
        def step():
            if temperature == 0.0:
                return torch.argmax(logits, dim=-1)
            scores = warp(logits.float(), temperature, top_k, top_p)
            return torch.multinomial(scores.softmax(dim=-1), num_samples=1)

        print(json.dumps({"case": "sample_" + name, "batch": args.batch, "vocab": args.vocab,
                          "gpu_ms_median": time_ms(step, args.reps),
                          "device": torch.cuda.get_device_name()}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", default="32,8", help="query and key/value heads, HQ,HKV")
    p.add_argument("--cache", type=int, default=4096)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--cases", choices=["attention", "sample", "all"], default="all")
    p.add_argument("--small", action="store_true")
    args = p.parse_args()
    args.vocab = 151936
    args.hq, args.hkv = (int(x) for x in args.heads.split(","))
    if args.hq <= 0 or args.hkv <= 0 or args.hq % args.hkv:
        p.error(f"--heads takes HQ,HKV with HQ a multiple of HKV, got {args.heads}")
    if args.small:
        args.batch, args.cache, args.vocab, args.reps = 1, 512, 4096, 3
    device = "cuda"
    with torch.no_grad():
        if args.cases != "sample":
            attention_cases(args, device)
        if args.cases != "attention":
            sample_cases(args, device)


if __name__ == "__main__":
    main()
