"""PyTorch counterpart of bench_resnet_train: torchvision's ResNets, one SGD-momentum training
step on a batch of random images and labels, CUDA-synchronized wall time; eager and
torch.compile, f32 and bf16 autocast; peak memory.

    python3 bench/resnet_train.py [--depth 18,50] [--batch 32] [--size 224] [--steps 20]
"""

import argparse
import json
import statistics
import time

import torch
import torchvision


def run(depth, batch, size, steps, mode, precision):
    torch.manual_seed(depth)
    model = getattr(torchvision.models, f"resnet{depth}")().cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if mode == "compile":
        step = torch.compile(step)
    for _ in range(3):
        step().item()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = step().item()
        ms.append((time.perf_counter() - start) * 1e3)
    return {"bench": "resnet_train", "framework": "pytorch", "mode": mode, "model": f"resnet{depth}",
            "batch": batch, "size": size, "precision": precision,
            "step_ms_median": statistics.median(ms), "step_ms_min": min(ms),
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20, "loss": loss}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", default="18,50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--precisions", default="f32,bf16")
    args = parser.parse_args()
    for depth in map(int, args.depth.split(",")):
        for mode in args.modes.split(","):
            for precision in args.precisions.split(","):
                print(json.dumps(run(depth, args.batch, args.size, args.steps, mode, precision)),
                      flush=True)


if __name__ == "__main__":
    main()
