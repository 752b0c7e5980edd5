"""PyTorch counterpart of bench_whisper_encoder: transformers' WhisperEncoder at
openai/whisper-tiny and -base sizes with random weights, inference (no_grad) and a training step
(loss sum(y * w), SGD) on random 30-second log-mel windows, CUDA-synchronized wall time, eager
and torch.compile, f32; peak memory.

    python3 bench/whisper_encoder.py [--sizes tiny,base] [--batch 1,8] [--steps 20]
"""

import argparse
import json
import os
import sys

import torch
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import measure  # noqa: E402

SIZES = {"tiny": (384, 4, 6), "base": (512, 6, 8), "small": (768, 12, 12)}


def run(size, batch, training, steps, mode):
    d, layers, heads = SIZES[size]
    cfg = WhisperConfig(num_mel_bins=80, d_model=d, encoder_layers=layers,
                        encoder_attention_heads=heads, encoder_ffn_dim=4 * d,
                        max_source_positions=1500, dropout=0.0, attention_dropout=0.0,
                        activation_dropout=0.0)
    torch.manual_seed(0)
    enc = WhisperEncoder(cfg).cuda().train(training)
    x = torch.rand(batch, 80, 3000, device="cuda") * 2 - 1
    w = torch.rand(batch, 1500, d, device="cuda") * 2 - 1
    opt = torch.optim.SGD(enc.parameters(), lr=1e-6)

    def infer():
        with torch.no_grad():
            return enc(x).last_hidden_state

    def train():
        opt.zero_grad(set_to_none=True)
        y = enc(x).last_hidden_state
        (y * w).sum().backward()
        opt.step()
        return y

    fn = train if training else infer
    if mode == "compile":
        fn = torch.compile(fn)
    return {"bench": "whisper_encoder", "framework": "pytorch", "mode": mode, "size": size,
            "batch": batch, "train": training, **measure(fn, steps)}

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,base")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--modes", default="eager,compile")
    args = parser.parse_args()
    for size in args.sizes.split(","):
        for batch in map(int, args.batch.split(",")):
            for training in (False, True):
                for mode in args.modes.split(","):
                    print(json.dumps(run(size, batch, training, args.steps, mode)), flush=True)


if __name__ == "__main__":
    main()
