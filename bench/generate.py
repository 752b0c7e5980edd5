"""Hugging Face counterpart of bench_generate: prefill and KV-cache decoding of a SmolLM2-shaped
Llama with random weights, batch 1, greedy, eager PyTorch on CUDA. Prints one JSON line.

  python3 bench/generate.py --make smollm2_135m --out DIR   # writes a random model directory once
  python3 bench/generate.py --model DIR [--dtype f32|bf16] [--prompt-tokens 256]
                            [--new-tokens 64] [--prefill-tokens 512]

The model directory is the same one bench_generate loads, so both run the same weights.
`prefill_ms` is the forward pass over --prefill-tokens tokens building the cache; `ms_per_token`
the median time of one decoding step (forward of one token with the cache, argmax, and the
token id read back to the host) after a --prompt-tokens prompt.
"""
import argparse
import json
import statistics
import time

import torch

SHAPES = {
    "smollm2_135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         rope_theta=100000.0),
    "smollm2_1.7b": dict(vocab_size=49152, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=32,
                         rope_theta=130000.0),
}


def make(shape, out):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=8192, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    print(json.dumps({"made": shape, "out": out}), flush=True)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, (time.perf_counter() - t0) * 1e3


def run(a):
    from transformers import AutoModelForCausalLM
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    dev = torch.device("cuda")
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype,
                                                 attn_implementation="sdpa").to(dev).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prefill = torch.randint(0, vocab, (1, a.prefill_tokens), generator=g).to(dev)
    prompt = torch.randint(0, vocab, (1, a.prompt_tokens), generator=g).to(dev)
    with torch.no_grad():
        for _ in range(3):
            model(input_ids=prefill, use_cache=True)
        prefill_times = [timed(lambda: model(input_ids=prefill, use_cache=True))[1]
                         for _ in range(10)]
        out = model(input_ids=prompt, use_cache=True)
        past = out.past_key_values
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        steps = []
        for _ in range(a.new_tokens):
            def one():
                nonlocal past, token
                o = model(input_ids=token, past_key_values=past, use_cache=True)
                past = o.past_key_values
                token = o.logits[:, -1].argmax(-1, keepdim=True)
                return token.item()
            steps.append(timed(one)[1])
    per_token = statistics.median(steps[3:])
    print(json.dumps({
        "name": f"generate_{a.model.rstrip('/').split('/')[-1]}", "impl": "pytorch",
        "mode": "eager", "precision": a.dtype, "torch": torch.__version__,
        "prompt_tokens": a.prompt_tokens, "generated_tokens": a.new_tokens,
        "prefill_tokens": a.prefill_tokens, "prefill_ms": statistics.median(prefill_times),
        "ms_per_token": per_token, "tokens_per_second": 1e3 / per_token,
        "device": torch.cuda.get_device_name()}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--make", choices=sorted(SHAPES))
    p.add_argument("--out")
    p.add_argument("--model")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--prefill-tokens", type=int, default=512)
    a = p.parse_args()
    if a.make:
        make(a.make, a.out)
    else:
        run(a)


if __name__ == "__main__":
    main()
