"""PyTorch counterpart of bench_smolvla: the re-implementation of lerobot's SmolVLA action
expert (tests/fixtures/smolvla/smolvla_torch.py) at lerobot/smolvla_base's sizes with random
weights, f32: the denoising loop (10 Euler steps over a chunk of 50, no_grad) and a
flow-matching training step (AdamW), over a prefix of random keys and values. Eager and
torch.compile (the whole loop or step; the loop runs its fixed count of steps, the same
arithmetic as lerobot's while loop). CUDA-synchronized wall time, peak memory.

    python3 bench/smolvla.py [--batch 1,8] [--prefix 241] [--steps 20] [--modes eager,compile]
"""
import argparse
import json
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures", "smolvla"))
from smolvla_torch import Config, VLAFlowMatching  # noqa: E402
from torch_timing import measure  # noqa: E402


def sample_fixed(model, mask, kv, noise):
    c = model.c
    dt = torch.tensor(-1.0 / c.num_steps, dtype=torch.float32, device=noise.device)
    x_t, t = noise, torch.tensor(1.0, dtype=torch.float32, device=noise.device)
    for _ in range(c.num_steps):
        x_t = x_t + dt * model.denoise_step(mask, kv, x_t, t.expand(noise.shape[0]))
        t = t + dt
    return x_t


def run(what, batch, prefix, steps, mode):
    c = Config()
    torch.manual_seed(0)
    model = VLAFlowMatching(c).cuda()
    dev = "cuda"
    kv = [(torch.rand(batch, prefix, c.kv_heads, c.head_dim, device=dev) * 2 - 1,
           torch.rand(batch, prefix, c.kv_heads, c.head_dim, device=dev) * 2 - 1)
          for _ in range(c.layers)]
    mask = torch.ones(batch, prefix, dtype=torch.bool, device=dev)
    noise = torch.randn(batch, c.chunk, c.max_action_dim, device=dev)
    actions = torch.rand(batch, c.chunk, c.max_action_dim, device=dev) * 2 - 1
    times = torch.rand(batch, device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    step_model = model
    if mode == "compile":  # one compiled denoising step, called num_steps times
        step_model = types.SimpleNamespace(c=c, denoise_step=torch.compile(model.denoise_step))

    def sample():
        with torch.no_grad():
            return sample_fixed(step_model, mask, kv, noise)

    loss_fn = model.flow_matching_loss
    if mode == "compile":
        loss_fn = torch.compile(loss_fn)

    def train():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(mask, kv, actions, noise, times)
        loss.backward()
        opt.step()
        return loss

    fn = sample if what == "sample" else train
    return {"bench": "smolvla", "framework": "pytorch", "mode": what, "torch_mode": mode,
            "batch": batch, "prefix": prefix, **measure(fn, steps)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--prefix", type=int, default=241)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--what", default="sample,train")
    parser.add_argument("--modes", default="eager,compile")
    args = parser.parse_args()
    for what in args.what.split(","):
        for batch in map(int, args.batch.split(",")):
            for mode in args.modes.split(","):
                print(json.dumps(run(what, batch, args.prefix, args.steps, mode)), flush=True)


if __name__ == "__main__":
    main()
