#!/usr/bin/env python3
"""Hugging Face `tokenizers` counterpart of bench_tokenizer: single-threaded encoding speed of a
byte-level BPE tokenizer on English text, in MB/s of UTF-8 input.

  --make-vocab DIR   trains the benchmark's vocabulary first: a 32000-token byte-level BPE in
                     Llama 3's style (Split on Llama 3's regex, then ByteLevel), trained on the
                     Debian copyright files under /usr/share/doc (about 20 MB of English legal
                     text), written to DIR/tokenizer.json
  --tokenizer DIR    the tokenizer to time (default: build/bench-tokenizer)
  --text FILE        the text (default: the licenses in /usr/share/common-licenses, joined)
  --repeats N        timed passes (default 5); each pass encodes every line of the text, then
                     (mb_per_s_whole_text_median) the whole text in one call

Usage: python3 bench/tokenizer.py [--make-vocab DIR] [--tokenizer DIR]
"""
import argparse
import glob
import json
import os
import pathlib
import statistics
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def default_text():
    files = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
    return "".join(pathlib.Path(p).read_text(errors="replace") for p in files)


def make_vocab(out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|begin_of_text|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(sorted(glob.glob("/usr/share/doc/*/copyright")), trainer)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-vocab")
    ap.add_argument("--tokenizer", default="build/bench-tokenizer")
    ap.add_argument("--text")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    if a.make_vocab:
        make_vocab(a.make_vocab)
        a.tokenizer = a.make_vocab
    text = pathlib.Path(a.text).read_text() if a.text else default_text()
    lines = text.splitlines(keepends=True)
    nbytes = len(text.encode())
    times, whole_times, tokens = [], [], 0
    path = str(pathlib.Path(a.tokenizer) / "tokenizer.json")
    for _ in range(a.repeats):
        # A fresh tokenizer each pass: its word cache starts empty, as on a first encode.
        tok = Tokenizer.from_file(path)
        t0 = time.perf_counter()
        tokens = sum(len(tok.encode(l, add_special_tokens=False).ids) for l in lines)
        times.append(time.perf_counter() - t0)
        tok = Tokenizer.from_file(path)
        t0 = time.perf_counter()
        tok.encode(text, add_special_tokens=False)
        whole_times.append(time.perf_counter() - t0)
    print(json.dumps({"implementation": "tokenizers", "vocab_size": tok.get_vocab_size(),
                      "text_bytes": nbytes, "tokens": tokens,
                      "mb_per_s_median": nbytes / 1e6 / statistics.median(times),
                      "mb_per_s_max": nbytes / 1e6 / min(times),
                      "mb_per_s_whole_text_median": nbytes / 1e6 / statistics.median(whole_times)}))


if __name__ == "__main__":
    main()
