#!/usr/bin/env python3
"""PyTorch counterpart of bench/vulkan_dispatch.cpp, printing JSON.

copy: device-to-device copy of a large float32 tensor (random data), bytes read + written
      over the time between CUDA events, median of many repetitions.
dispatch: a chain of tiny dependent kernels (x.add_(step) on 64 int32 values) captured in a
      CUDA graph; replay time per kernel. Eager launches are reported too.
Without CUDA the same work runs on the CPU with wall-clock timing (for trying the script).
"""
import argparse
import json
import statistics
import time

import torch


def timed(fn, cuda):
    if cuda:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def bench_copy(device, nbytes, reps):
    cuda = device.type == "cuda"
    n = nbytes // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    if cuda:
        torch.cuda.synchronize()
    ms = [timed(lambda: dst.copy_(src), cuda) for _ in range(reps)]
    correct = bool(torch.equal(dst, src))
    moved = 2 * n * 4
    med, best = statistics.median(ms), min(ms)
    return {
        "buffer_bytes": n * 4,
        "bytes_moved_per_rep": moved,
        "reps": reps,
        "median_ms": med,
        "min_ms": best,
        "gbps_median": moved / (med * 1e-3) / 1e9,
        "gbps_best": moved / (best * 1e-3) / 1e9,
        "correct": correct,
    }


def bench_chain(device, chain, submits):
    cuda = device.type == "cuda"
    x = torch.randint(0, 1 << 20, (64,), dtype=torch.int32, device=device)
    initial = x.clone()

    def body():
        for s in range(chain):
            x.add_(s + 1)

    runs = 0
    result = {"chain": chain, "submits": submits}
    if cuda:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            body()  # warm-up outside the graph
        torch.cuda.current_stream().wait_stream(stream)
        runs += 1
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        graph.replay()
        runs += 1
        ms = [timed(graph.replay, True) for _ in range(submits)]
        runs += submits
        result["us_per_launch_graph_median"] = statistics.median(ms) * 1e3 / chain
        result["us_per_launch_graph_min"] = min(ms) * 1e3 / chain
    eager = [timed(body, cuda) for _ in range(submits)]
    runs += submits
    result["us_per_launch_eager_median"] = statistics.median(eager) * 1e3 / chain
    step_sum = chain * (chain + 1) // 2
    result["correct"] = bool(torch.equal(x, initial + runs * step_sum))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copy-mib", type=float, default=0,
                        help="copy size (default: 1024 on CUDA, 64 on the CPU)")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--chain", type=int, default=1000)
    parser.add_argument("--submits", type=int, default=10)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    mib = args.copy_mib or (1024 if cuda else 64)
    out = {
        "bench": "vulkan_dispatch_torch",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "copy": bench_copy(device, int(mib * (1 << 20)), args.reps),
        "dispatch": bench_chain(device, args.chain, args.submits),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
