"""PyTorch counterpart of bench_unet: the re-implementation of diffusers' UNet2DModel
(tests/fixtures/unet/unet_torch.py) at meganeura's small configuration (32, 64, 64 channels at
28², 14², 7², attention at 14² and 7², GroupNorm of 8 groups, heads of 8), 1 channel, random
weights, f32: a DDPM training step (noise-prediction loss, Adam) and DDIM sampling (50 steps,
no_grad). Eager and torch.compile (the loss, or the U-Net called by the sampling loop).
CUDA-synchronized wall time, peak memory.

    python3 bench/unet.py [--batch 4,32] [--steps 20] [--sampling-steps 50] [--modes eager,compile]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures", "unet"))
from torch_timing import measure  # noqa: E402
from unet_torch import Config, Scheduler, UNet2DModel, linear_betas  # noqa: E402

SMALL = Config(in_channels=1, out_channels=1, block_out_channels=(32, 64, 64),
               down_block_types=("DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"),
               up_block_types=("AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
               layers_per_block=2, attention_head_dim=8, norm_num_groups=8)


def run(what, batch, steps, sampling_steps, mode):
    torch.manual_seed(0)
    dev = "cuda"
    model = UNet2DModel(SMALL).to(dev)
    shape = (batch, 1, 28, 28)
    x0 = torch.rand(shape, device=dev) * 2 - 1
    noise = torch.randn(shape, device=dev)
    t = (torch.arange(batch, device=dev) * 397 + 11) % 1000
    alphas_cumprod = torch.cumprod(1.0 - linear_betas(), dim=0).float().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of(x0, noise, t):
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return F.mse_loss(model(x_t, t.float()), noise)

    unet = model
    if mode == "compile":
        loss_of = torch.compile(loss_of)
        unet = torch.compile(model)

    def train():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x0, noise, t)
        loss.backward()
        opt.step()
        return loss

    scheduler = Scheduler(linear_betas())
    scheduler.set_timesteps(sampling_steps)

    def sample():  # diffusers' DDIM loop, eta 0, as in tests/fixtures/unet
        with torch.no_grad():
            x = noise
            for step in scheduler.timesteps:
                eps = unet(x, torch.full((batch,), float(step), device=dev))
                x = scheduler.ddim_step(eps, step, x).float()
            return x

    fn = train if what == "train" else sample
    n = steps if what == "train" else max(3, steps // 4)
    out = {"bench": "unet", "framework": "pytorch", "mode": what, "torch_mode": mode,
           "batch": batch, "image": 28}
    if what == "sample":
        out["sampling_steps"] = sampling_steps
    return {**out, **measure(fn, n, warmup=3 if what == "train" else 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="4,32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sampling-steps", type=int, default=50)
    parser.add_argument("--what", default="train,sample")
    parser.add_argument("--modes", default="eager,compile")
    args = parser.parse_args()
    for what in args.what.split(","):
        for batch in map(int, args.batch.split(",")):
            for mode in args.modes.split(","):
                print(json.dumps(run(what, batch, args.steps, args.sampling_steps, mode)), flush=True)


if __name__ == "__main__":
    main()
