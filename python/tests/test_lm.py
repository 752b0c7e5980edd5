"""Language models from Python: tokenizers against Hugging Face `tokenizers` (the committed
cases of tests/fixtures/lm/make_tokenizer_cases.py), greedy generation against transformers'
(tests/fixtures/lm/make_models.py), batches, stop texts, streaming and chat."""

import json

import numpy as np
import pytest

import meganeura as mn
from conftest import FIXTURES

LM = FIXTURES / "lm"


@pytest.fixture(scope="module")
def cases():
    return json.loads((LM / "tokenizer_cases.json").read_text())


@pytest.mark.parametrize("style", ["gpt2", "llama3", "qwen"])
def test_tokenizer_matches_hugging_face(cases, style):
    tok = mn.lm.Tokenizer.from_dir(LM / "tokenizers" / style)
    expected = cases[style]
    assert len(expected["ids"]) == len(cases["lines"]) == 1000
    # Decoding gives the line back after the special tokens encoding adds, unless the cases
    # say otherwise for that line (by its index).
    prefix = tok.decode(tok.encode(""))
    for i, (line, ids) in enumerate(zip(cases["lines"], expected["ids"])):
        ids = [int(t) for t in ids.split()]  # the cases hold ids as space-separated text
        assert tok.encode(line) == ids, line
        assert tok.decode(ids) == expected["decoded"].get(str(i), prefix + line), line
        assert tok.decode(ids, skip_special_tokens=True) == expected["decoded_skip"].get(
            str(i), line), line
    for chat in expected["chats"]:
        assert tok.format_chat(chat["messages"], chat["add_generation_prompt"]) == chat["text"]
        assert tok.encode_chat(chat["messages"], chat["add_generation_prompt"]) == chat["ids"]


def test_tokenizer_refusals(tmp_path):
    with pytest.raises(mn.FormatError, match="tokenizer.json"):
        mn.lm.Tokenizer.from_dir(tmp_path)
    tok = mn.lm.Tokenizer.from_dir(LM / "tokenizers" / "qwen")
    with pytest.raises(mn.Error, match="role"):
        tok.format_chat([{"content": "hi"}])


def greedy_cases(name):
    ref = mn.data.load_safetensors(LM / "reference" / f"{name}.safetensors")
    out = []
    for i in range(2):
        prompt = ref[f"prompt_{i}"].reshape(-1).tolist()
        full = ref[f"greedy_{i}"].reshape(-1).tolist()
        out.append((prompt, full[len(prompt):]))
    return out


@pytest.mark.parametrize("name", ["llama_tied", "qwen3_tiny"])
def test_greedy_generation_equals_transformers(name):
    model = mn.lm.LanguageModel(LM / "models" / name, batch=2, max_context=64)
    cases = greedy_cases(name)
    results = model.generate([p for p, _ in cases], max_new_tokens=16, temperature=0)
    for (prompt, continuation), r in zip(cases, results):
        assert r["tokens"] == continuation
        assert r["finish"] in ("stop_token", "length")
    stats = model.last_stats
    assert stats["prompt_tokens"] == sum(len(p) for p, _ in cases)
    assert stats["generated_tokens"] == sum(len(c) for _, c in cases)
    # One prompt of a batch-2 model, as text: the same continuation as its ids.
    text = model.tokenizer.decode(cases[0][0])
    single = model.generate(text, max_new_tokens=16, temperature=0)
    assert model.tokenizer.encode(text) == cases[0][0]
    assert single["tokens"] == cases[0][1]


def test_streaming_stop_texts_and_sampling():
    model = mn.lm.LanguageModel(LM / "models" / "llama_tied", max_context=64)
    pieces = []
    full = model.generate("The Zen of Python, by", max_new_tokens=12, temperature=0,
                          on_text=lambda i, text: pieces.append((i, text)))
    assert "".join(t for _, t in pieces) == full["text"]
    assert {i for i, _ in pieces} <= {0}
    if len(full["text"]) > 2:
        stop = full["text"][1:3]
        cut = model.generate("The Zen of Python, by", max_new_tokens=12, temperature=0,
                             stop=[stop])
        assert cut["finish"] == "stop_string"
        assert stop not in cut["text"]
    a = model.generate("The", max_new_tokens=8, temperature=1.5, top_k=20, seed=3)
    b = model.generate("The", max_new_tokens=8, temperature=1.5, top_k=20, seed=3)
    assert a["tokens"] == b["tokens"]
    with pytest.raises(mn.Error, match="top_p must be in"):
        model.generate("The", top_p=0.0)
    with pytest.raises(mn.Error, match="temperature must be"):
        model.generate("The", temperature=-1.0)
    with pytest.raises(mn.Error, match="empty"):
        model.generate("")


def test_decode_chains_give_the_tokens_of_single_steps():
    chained = mn.lm.LanguageModel(LM / "models" / "qwen3_tiny", max_context=64, decode_chain=3)
    single = mn.lm.LanguageModel(LM / "models" / "qwen3_tiny", max_context=64, decode_chain=1)
    for options in ({"temperature": 0}, {"temperature": 1.2, "top_k": 30, "seed": 4}):
        a = chained.generate("The Zen of Python, by", max_new_tokens=14, **options)
        b = single.generate("The Zen of Python, by", max_new_tokens=14, **options)
        assert a["tokens"] == b["tokens"]
    with pytest.raises(mn.Error, match="decode_chain must be at least 0"):
        mn.lm.LanguageModel(LM / "models" / "qwen3_tiny", decode_chain=-1)


def test_chat_keeps_the_cache():
    model = mn.lm.LanguageModel(LM / "models" / "qwen3_tiny", max_context=128)
    chat = mn.lm.Conversation(model, system="Be brief.")
    chat.reply("Hello", max_new_tokens=4, temperature=0)
    first = chat.cached_tokens
    chat.reply("Again", max_new_tokens=4, temperature=0)
    assert chat.cached_tokens > first
    assert chat.last_turn_new_tokens < chat.cached_tokens
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "user",
                                                 "assistant"]
    chat.reset()
    assert [m["role"] for m in chat.messages] == ["system"]


def test_model_refusals(tmp_path):
    with pytest.raises(mn.FormatError, match="config.json"):
        mn.lm.LanguageModel(tmp_path)
    with pytest.raises(mn.Error, match="dtype"):
        mn.lm.LanguageModel(LM / "models" / "llama_tied", dtype="i32")
    model = mn.lm.LanguageModel(LM / "models" / "llama_tied", batch=2, max_context=32)
    with pytest.raises(mn.Error, match="batch must be 1"):
        mn.lm.Conversation(model)
