"""Generate text with a Hugging Face causal LM directory (Llama, Qwen2, Qwen3), streaming it as
it comes, then chat with it keeping the KV cache across turns.

    PYTHONPATH=build/python .venv/bin/python examples/generate.py \\
        tests/fixtures/lm/models/qwen3_tiny --prompt "The Zen of Python, by"
"""

import argparse
import sys

import meganeura as mn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a Hugging Face model directory")
    parser.add_argument("--prompt", default="The Zen of Python, by")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--dtype", default="f32", help="storage of the weights: f32, f16, bf16")
    parser.add_argument("--device", default="")
    args = parser.parse_args()

    model = mn.lm.LanguageModel(args.model, dtype=args.dtype, device=args.device)
    print(f"{model.architecture} on {model.device_name}", file=sys.stderr)
    sys.stdout.write(args.prompt)
    result = model.generate(args.prompt, max_new_tokens=args.max_new_tokens,
                            temperature=args.temperature,
                            on_text=lambda _, text: (sys.stdout.write(text), sys.stdout.flush()))
    stats = model.last_stats
    print(f"\n[{result['finish']}: {stats['generated_tokens']} tokens, "
          f"{stats['decode_ms'] / max(stats['decode_steps'], 1):.2f} ms/token]", file=sys.stderr)

    chat = mn.lm.Conversation(model, system="You are brief.")
    for question in ["Hello!", "What did I just say?"]:
        print(f"> {question}\n{chat.reply(question, max_new_tokens=args.max_new_tokens)}")
    print(f"[{chat.cached_tokens} tokens in the cache]", file=sys.stderr)


if __name__ == "__main__":
    main()
