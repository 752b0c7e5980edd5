"""PyTorch counterpart of bench_transformer_train: a SmolLM2-135M-shaped Llama (Hugging Face
transformers, SDPA attention, tied embeddings), AdamW, fp32, eager; one step = forward,
backward, optimizer step and loss readback. Prints one JSON line. --precision bf16|f16 runs
the forward under torch.autocast (f32 master weights and optimizer, as
SessionOptions::precision does; f16 with a GradScaler). --compile runs the model's forward and
loss under torch.compile (mode reduce-overhead; the backward is compiled with it, the optimizer
runs eagerly). "peak_mib" is torch.cuda.max_memory_allocated over the timed steps.

Usage: python3 bench/transformer_train.py [--steps N] [--layers L] [--batch B] [--sequence S]
                                          [--precision f32|bf16|f16] [--compile]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--layers", type=int, default=30)
p.add_argument("--batch", type=int, default=1)
p.add_argument("--sequence", type=int, default=256)
p.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32")
p.add_argument("--compile", action="store_true")
a = p.parse_args()

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

dev = torch.device("cuda")
cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                  num_hidden_layers=a.layers, num_attention_heads=9, num_key_value_heads=3,
                  max_position_embeddings=2048, rope_theta=100000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=True)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
model = LlamaForCausalLM(cfg).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
tokens = torch.randint(0, 49152, (a.batch, a.sequence), device=dev)
targets = torch.roll(tokens, -1, 1)
targets[:, -1] = -100


amp = {"bf16": torch.bfloat16, "f16": torch.float16}.get(a.precision)
scaler = torch.amp.GradScaler("cuda") if a.precision == "f16" else None


def forward_loss():
    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        logits = model(input_ids=tokens).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


if a.compile:
    forward_loss = torch.compile(forward_loss, mode="reduce-overhead")


def step():
    opt.zero_grad(set_to_none=True)
    loss = forward_loss()
    if scaler:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    return loss.item()


for _ in range(3):
    step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
times = []
for _ in range(a.steps):
    t0 = time.perf_counter()
    loss = step()
    times.append((time.perf_counter() - t0) * 1e3)
name = f"smollm2_135m_train_b{a.batch}_s{a.sequence}" + ("" if a.layers == 30 else f"_l{a.layers}")
print(json.dumps({"name": name, "impl": "pytorch", "mode": "compile" if a.compile else "eager",
                  "precision": a.precision, "torch": torch.__version__,
                  "step_ms_median": statistics.median(times), "step_ms_min": min(times),
                  "steps": a.steps, "final_loss": loss,
                  "peak_mib": torch.cuda.max_memory_allocated() / 2**20}), flush=True)
