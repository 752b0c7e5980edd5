"""How the PyTorch counterparts time a step: a few warm-up calls, then each call followed by a
CUDA synchronization, wall time in ms; the median and the peak of allocated memory."""
import statistics
import time

import torch


def measure(fn, steps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - start) * 1e3)
    return {"step_ms_median": statistics.median(ms),
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20}
