"""transformers counterpart of bench_smolvlm: SmolVLM2-500M (random weights) answering about one
image, batch 1, greedy, on CUDA. Prints one JSON line per mode.

  python3 bench/smolvlm.py --make DIR      # writes the random model directory once
  python3 bench/smolvlm.py --model DIR [--frames 17] [--text-tokens 16] [--new-tokens 32]
                           [--dtype f32|bf16]

The prompt is bench_smolvlm's: 3 tokens, per frame <fake_token_around_image> and 64 <image>
tokens, then --text-tokens tokens. `vision_ms`: get_image_features of the frames (eager, and
torch.compile'd); `ttft_ms`: the forward pass over the prompt with pixel_values (vision, splice
and prefill, building the cache) and the first token read back; `ms_per_token`: the median
decoding step (one token with the cache, argmax, the id read back).
"""
import argparse
import json
import statistics
import time

import torch

# HuggingFaceTB/SmolVLM2-500M-Video-Instruct's sizes.
VISION = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              image_size=512, patch_size=16, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh")
TEXT = dict(model_type="llama", vocab_size=49280, hidden_size=960, intermediate_size=2560,
            num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5, head_dim=64,
            rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=8192,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=2)
IMAGE_TOKEN = 49190


def make(out):
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration
    from transformers.models.smolvlm import SmolVLMImageProcessorPil
    torch.manual_seed(0)
    cfg = SmolVLMConfig(vision_config=VISION, text_config=TEXT, scale_factor=4,
                        image_token_id=IMAGE_TOKEN, tie_word_embeddings=False)
    SmolVLMForConditionalGeneration(cfg).save_pretrained(out)
    SmolVLMImageProcessorPil(size={"longest_edge": 2048},
                             max_image_size={"longest_edge": 512}).save_pretrained(out)
    print(json.dumps({"made": "smolvlm2_500m", "out": out}), flush=True)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, (time.perf_counter() - t0) * 1e3


def prompt_ids(frames, text, seq_len):
    ids = [1, 2, 3]
    for _ in range(frames):
        ids += [IMAGE_TOKEN - 1] + [IMAGE_TOKEN] * seq_len
    return ids + [100 + i for i in range(text)]


def run(a):
    from transformers import AutoModelForImageTextToText
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    dev = torch.device("cuda")
    model = AutoModelForImageTextToText.from_pretrained(
        a.model, dtype=dtype, attn_implementation="sdpa").to(dev).eval()
    seq_len = model.model.image_seq_len
    ids = torch.tensor([prompt_ids(a.frames, a.text_tokens, seq_len)], device=dev)
    g = torch.Generator().manual_seed(7)
    pixels = (torch.rand((1, a.frames, 3, 512, 512), generator=g) * 2 - 1).to(dev, dtype)
    common = {"name": f"smolvlm_{a.model.rstrip('/').split('/')[-1]}", "impl": "pytorch",
              "precision": a.dtype, "torch": torch.__version__, "frames": a.frames,
              "prompt_tokens": ids.shape[1], "new_tokens": a.new_tokens}
    with torch.no_grad():
        vision = lambda: model.model.get_image_features(pixels)  # noqa: E731
        for _ in range(3):
            vision()
        vision_ms = statistics.median(timed(vision)[1] for _ in range(10))

        def first_token():
            o = model(input_ids=ids, pixel_values=pixels, use_cache=True)
            return o, o.logits[:, -1].argmax(-1, keepdim=True).item()
        for _ in range(2):
            first_token()
        torch.cuda.reset_peak_memory_stats()
        ttft = [timed(first_token)[1] for _ in range(5)]
        out, token = first_token()
        past = out.past_key_values
        token = torch.tensor([[token]], device=dev)
        steps = []
        for _ in range(a.new_tokens):
            def one():
                nonlocal past, token
                o = model(input_ids=token, past_key_values=past, use_cache=True)
                past = o.past_key_values
                token = o.logits[:, -1].argmax(-1, keepdim=True)
                return token.item()
            steps.append(timed(one)[1])
        print(json.dumps({**common, "mode": "eager", "vision_ms": vision_ms,
                          "ttft_ms": statistics.median(ttft),
                          "ms_per_token": statistics.median(steps[3:]),
                          "peak_mib": torch.cuda.max_memory_allocated() / 2**20}), flush=True)
        compiled = torch.compile(model.model.get_image_features)
        for _ in range(3):
            compiled(pixels)
        compiled_ms = statistics.median(timed(lambda: compiled(pixels))[1] for _ in range(10))
        print(json.dumps({**common, "mode": "compile", "vision_ms": compiled_ms}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--make")
    p.add_argument("--model")
    p.add_argument("--frames", type=int, default=17)
    p.add_argument("--text-tokens", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--dtype", default="f32")
    a = p.parse_args()
    if a.make:
        make(a.make)
    else:
        run(a)


if __name__ == "__main__":
    main()
