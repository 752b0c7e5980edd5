#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (fuzz/corpus/<parser>/seed-*): small valid
inputs of every parser, made with Python's struct, gzip and json modules (independently of the
library), plus trimmed copies of the test fixtures' tokenizers and configs. Inputs that once
crashed a parser are added beside them by hand (crash-* files) and are never rewritten here.

Usage: python3 fuzz/make_corpus.py   (from the repository root)
"""
import gzip
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
FIXTURES = ROOT / "tests" / "fixtures" / "lm"


WRITTEN = set()


def write(parser, name, data):
    data = data if isinstance(data, bytes) else data.encode()
    if (parser, data) in WRITTEN:  # fixtures that share a file
        return
    WRITTEN.add((parser, data))
    d = CORPUS / parser
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + name)).write_bytes(data)


# ---- IDX: magic 00 00 <type> <rank>, big-endian u32 dims, big-endian elements ----

IDX_TYPES = {"u8": (0x08, "B"), "i8": (0x09, "b"), "i16": (0x0B, "h"), "i32": (0x0C, "i"),
             "f32": (0x0D, "f"), "f64": (0x0E, "d")}


def idx(kind, dims, values, declared=None):
    code, fmt = IDX_TYPES[kind]
    head = bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in (declared or dims))
    return head + b"".join(struct.pack(">" + fmt, v) for v in values)


def gz(data):
    return gzip.compress(data, mtime=0)


def idx_corpus():
    images = idx("u8", [3, 2, 2], [i * 21 % 256 for i in range(12)])
    write("idx", "images.idx", images)
    write("idx", "images.idx.gz", gz(images))
    write("idx", "labels.idx", idx("u8", [3], [1, 7, 9]))
    write("idx", "i8.idx", idx("i8", [4], [-128, -1, 0, 127]))
    write("idx", "i16.idx.gz", gz(idx("i16", [2, 2], [-300, 0, 1, 32767])))
    write("idx", "i32.idx", idx("i32", [2, 3], [1, -2, 3, 2**31 - 1, -2**31, 0]))
    write("idx", "f32.idx", idx("f32", [2, 1, 2], [0.5, -1.25, 3e38, 1e-40]))
    write("idx", "f64.idx", idx("f64", [2], [1.0 / 3, -2.0]))
    write("idx", "scalar.idx", idx("u8", [], [5]))
    # A header declaring more rows than the content holds, and two concatenated gzip members.
    write("idx", "declares_more.idx.gz", gz(idx("u8", [3, 2, 2], list(range(12)), [1000, 2, 2])))
    write("idx", "two_members.idx.gz", gz(images[:10]) + gz(images[10:]))


# ---- safetensors: u64 header length, JSON header, data ----

def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_corpus():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    write("safetensors", "f32.safetensors", safetensors(
        {"w": ("F32", [2, 2], f32), "b": ("BF16", [3], struct.pack("<3H", 0x3F80, 0xC000, 0x7FC0))},
        {"format": "pt"}))
    write("safetensors", "ints.safetensors", safetensors(
        {"a": ("I32", [2], struct.pack("<2i", -5, 7)), "m": ("BOOL", [3], bytes([0, 1, 1])),
         "h": ("F16", [1, 2], struct.pack("<2H", 0x3C00, 0xFC00)),
         "l": ("I64", [1], struct.pack("<q", -(2**40))), "e": ("F32", [0], b"")}))
    write("safetensors", "scalar.safetensors", safetensors({"s": ("F64", [], struct.pack("<d", 2.5))}))
    write("safetensors", "metadata_only.safetensors", safetensors({}, {"a": "1", "b": "x"}))


def checkpoint_corpus():
    tiny = {"w": ("F32", [2], struct.pack("<2f", 0.25, -0.5))}
    write("checkpoint_metadata", "training.safetensors", safetensors(tiny, {
        "format": "meganeura-checkpoint-1", "model": "mlp", "optimizer": "adam", "batch": "16",
        "global_step": "5", "next_epoch": "1", "next_step": "1"}))
    write("checkpoint_metadata", "finetuning.safetensors", safetensors(tiny, {
        "format": "meganeura-finetune-1", "seq": "16", "batch": "2", "global_step": "3",
        "next_epoch": "0", "next_index": "7"}))


# ---- Hugging Face tokenizers and configs ----

def trimmed_tokenizer(path, keep=300):
    """The fixture tokenizer with its vocabulary cut to the first `keep` ids and the merges
    among them, so that a seed stays a few kilobytes."""
    j = json.loads(path.read_text())
    vocab = {t: i for t, i in j["model"]["vocab"].items() if i < keep}
    merges = []
    for m in j["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    j["added_tokens"] = [t for t in j["added_tokens"] if t["id"] < keep]
    return json.dumps(j, ensure_ascii=False, separators=(",", ":"))


def tokenizer_corpus():
    for name in ["gpt2", "llama3", "qwen", "features"]:
        tok = FIXTURES / "tokenizers" / name / "tokenizer.json"
        write("tokenizer_json", name + ".json", trimmed_tokenizer(tok))
        config = FIXTURES / "tokenizers" / name / "tokenizer_config.json"
        if config.exists():
            write("tokenizer_config", name + ".json", config.read_text())
        j = json.loads(tok.read_text())
        for pre in j["pre_tokenizer"].get("pretokenizers", [j["pre_tokenizer"]]):
            pattern = pre.get("pattern", {}).get("Regex")
            if pattern:
                write("regex", name + ".txt", pattern + "\0It's 2024: ünïcödé\n  text 🙂")
    # The tokenizer of the tokenizer_config harness: GPT-2's, with the special tokens of every
    # family, so that each family's tokenizer_config.json finds its tokens.
    merged = json.loads(trimmed_tokenizer(FIXTURES / "tokenizers" / "gpt2" / "tokenizer.json"))
    have = {t["content"] for t in merged["added_tokens"]}
    next_id = 300
    for name in ["llama3", "qwen"]:
        j = json.loads((FIXTURES / "tokenizers" / name / "tokenizer.json").read_text())
        for t in j["added_tokens"]:
            if t["content"] not in have:
                merged["added_tokens"].append(dict(t, id=next_id))
                have.add(t["content"])
                next_id += 1
    write("tokenizer_json", "all_specials.json",
          json.dumps(merged, ensure_ascii=False, separators=(",", ":")))
    write("regex", "gpt2_bytelevel.txt",
          r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    write("regex", "syntax.txt", r"(?i:ab)|[a-f\x{41}-\x{5A}]{2,3}?|(?=x)x*+|(?>y+)|\D\W\S.$" +
          "\0ABCD xxyy 123")


def config_corpus():
    for model in sorted((FIXTURES / "models").iterdir()):
        write("lm_config", model.name + ".json", (model / "config.json").read_text())
        gen = model / "generation_config.json"
        if gen.exists():
            write("generation_config", model.name + ".json", gen.read_text())
    llama3 = json.loads((FIXTURES / "models" / "llama_tied" / "config.json").read_text())
    llama3["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    llama3["torch_dtype"] = "bfloat16"
    write("lm_config", "llama3_rope_scaling.json", json.dumps(llama3, indent=1))
    write("generation_config", "sampling.json", json.dumps(
        {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
         "max_new_tokens": 64, "eos_token_id": [2, 5], "bos_token_id": 1, "pad_token_id": None}))


# ---- ONNX models: small node tests of the backend suite (Debian's libonnx-testdata, when
# installed) covering every converter family, and an exported model of the fixtures ----

ONNX_NODE_TESTS = pathlib.Path("/usr/share/libonnx-testdata/data/node")
ONNX_SEEDS = ["test_add_bcast", "test_conv_with_strides_and_asymmetric_padding", "test_maxpool_2d_pads",
              "test_reshape_negative_dim", "test_slice_neg_steps", "test_gather_elements_1",
              "test_resize_upsample_scales_cubic", "test_lstm_with_peepholes", "test_gru_defaults",
              "test_einsum_transpose", "test_scatternd", "test_softmax_example_expanded",
              "test_layer_normalization_3d_axis0_epsilon_expanded", "test_cast_FLOAT_to_FLOAT16",
              "test_constantofshape_int_zeros", "test_topk", "test_sce_NCd1_mean_weight_negative_ii",
              "test_convtranspose_output_shape", "test_range_float_type_positive_delta_expanded"]


def onnx_corpus():
    for name in ONNX_SEEDS:
        model = ONNX_NODE_TESTS / name / "model.onnx"
        if model.exists():
            write("onnx_model", name + ".onnx", model.read_bytes())
    write("onnx_model", "mlp_block.onnx", (ROOT / "tests/fixtures/onnx/mlp_block.onnx").read_bytes())


if __name__ == "__main__":
    onnx_corpus()
    idx_corpus()
    safetensors_corpus()
    checkpoint_corpus()
    tokenizer_corpus()
    config_corpus()
