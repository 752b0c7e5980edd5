// Hugging Face directories that are broken in each way a download or an edit can break them,
// storage dtypes, a positions input, and saving.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/causal_lm.h>
#include <meganeura/data.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

#include "data/test_util.h"

#include "support/random_fill.h"

namespace mn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_format_error;

const fs::path kLm = fs::path(MN_SOURCE_DIR) / "tests/fixtures/lm";

// A writable copy of a fixture directory.
class ModelCopy {
 public:
  explicit ModelCopy(const std::string& name) : dir_(scratch_ / name) {
    fs::copy(kLm / "models" / name, dir_, fs::copy_options::recursive);
  }
  const fs::path& dir() const { return dir_; }
  fs::path operator/(const std::string& f) const { return dir_ / f; }

  json config() const { return json::parse(test::read_bytes(dir_ / "config.json")); }
  void set_config(const json& j) const {
    const std::string text = j.dump();
    test::write_bytes(dir_ / "config.json", {text.begin(), text.end()});
  }
  // Rewrites a safetensors file after `edit` changed its tensors.
  void rewrite(
      const std::string& file,
      const std::function<void(std::vector<std::string>&, std::vector<RawTensor>&)>& edit) const {
    SafetensorsReader r(dir_ / file);
    std::vector<std::string> names;
    std::vector<RawTensor> raws;
    for (const auto& e : r.entries()) {
      names.push_back(e.name);
      raws.push_back(r.raw(e.name));
    }
    edit(names, raws);
    std::vector<TensorView> views;
    for (size_t i = 0; i < raws.size(); ++i) views.push_back(view(names[i], raws[i]));
    write_safetensors(dir_ / file, views);
  }

 private:
  test::ScratchDir scratch_;
  fs::path dir_;
};

Array reference_array(const std::string& model, const std::string& name) {
  return SafetensorsReader(kLm / "reference" / (model + ".safetensors")).array(name);
}

TEST(HfModel, LoadsSingleFileAndShardedDirectories) {
  const HfModel tied = load_hf_model(kLm / "models/llama_tied");
  EXPECT_TRUE(tied.config.tie_word_embeddings);
  EXPECT_EQ(tied.weight_files.size(), 1u);
  EXPECT_FALSE(tied.tensors.count("lm_head.weight"));
  const HfModel sharded = load_hf_model(kLm / "models/llama_bf16_sharded");
  EXPECT_EQ(sharded.weight_files.size(), 3u);
  ASSERT_TRUE(sharded.config.rope_scaling);
  EXPECT_EQ(sharded.tensors.at("lm_head.weight").entry.type, ElemType::bf16);
  EXPECT_EQ(sharded.generation.eos_token_id, std::vector<int64_t>{4});
}

TEST(HfModel, MissingOrCorruptConfig) {
  ModelCopy m("llama_tied");
  fs::remove(m / "config.json");
  expect_format_error([&] { load_hf_model(m.dir()); }, {(m / "config.json").string(), "open"});
  test::write_bytes(m / "config.json", {'{', '"', 'a'});
  expect_format_error([&] { load_hf_model(m.dir()); }, {(m / "config.json").string(), "JSON"});
  expect_format_error([&] { load_hf_model(m / "nowhere"); }, {"nowhere", "not a directory"});
}

TEST(HfModel, UnknownArchitecture) {
  ModelCopy m("llama_tied");
  json c = m.config();
  c["architectures"] = {"GPT2LMHeadModel"};
  m.set_config(c);
  expect_format_error([&] { load_hf_model(m.dir()); },
                      {"config.json", "GPT2LMHeadModel", "LlamaForCausalLM"});
}

TEST(HfModel, MissingTensorNamesItAndTheFilesSearched) {
  ModelCopy m("llama_bf16_sharded");
  SafetensorsReader shard(m / "model-00002-of-00003.safetensors");
  const std::string gone = shard.entries().front().name;
  m.rewrite("model-00002-of-00003.safetensors", [&](auto& names, auto& raws) {
    names.erase(names.begin());
    raws.erase(raws.begin());
  });
  json index = json::parse(test::read_bytes(m / "model.safetensors.index.json"));
  index["weight_map"].erase(gone);
  const std::string text = index.dump();
  test::write_bytes(m / "model.safetensors.index.json", {text.begin(), text.end()});
  expect_format_error([&] { load_hf_model(m.dir()); },
                      {"missing tensor '" + gone + "'", "model-00001-of-00003.safetensors",
                       "model-00003-of-00003.safetensors"});
}

TEST(HfModel, ShapeDisagreeingWithConfig) {
  ModelCopy m("qwen2_tiny");
  json c = m.config();
  c["intermediate_size"] = c["intermediate_size"].get<int>() + 2;
  m.set_config(c);
  expect_format_error(
      [&] { load_hf_model(m.dir()); },
      {"model.safetensors", "model.layers.0.mlp.gate_proj.weight",
       "has shape [" + std::to_string(c["intermediate_size"].get<int>() - 2) + ", 64]",
       "gives [" + std::to_string(c["intermediate_size"].get<int>()) + ", 64]"});
}

TEST(HfModel, ExtraTensorsAreErrors) {
  ModelCopy m("llama_tied");
  m.rewrite("model.safetensors", [](auto& names, auto& raws) {
    names.push_back("lm_head.weight");
    raws.push_back(raws.front());  // an untied head beside tied embeddings
  });
  expect_format_error(
      [&] { load_hf_model(m.dir()); },
      {"model.safetensors", "unexpected tensor 'lm_head.weight'", "tie_word_embeddings"});
  ModelCopy q("qwen3_tiny");
  q.rewrite("model.safetensors", [](auto& names, auto& raws) {
    names.push_back("model.layers.0.self_attn.rotary_emb.inv_freq");
    raws.push_back(RawTensor{ElemType::f32, {2}, std::vector<uint8_t>(8)});
  });
  expect_format_error([&] { load_hf_model(q.dir()); },
                      {"unexpected tensor 'model.layers.0.self_attn.rotary_emb.inv_freq'"});
}

TEST(HfModel, TruncatedShardNamesFileAndOffset) {
  ModelCopy m("llama_bf16_sharded");
  const fs::path shard = m / "model-00003-of-00003.safetensors";
  std::vector<uint8_t> bytes = test::read_bytes(shard);
  bytes.resize(bytes.size() - 100);
  test::write_bytes(shard, bytes);
  expect_format_error([&] { load_hf_model(m.dir()); }, {shard.string(), "byte"});
}

TEST(HfModel, IndexPointingAtMissingShard) {
  ModelCopy m("llama_bf16_sharded");
  fs::remove(m / "model-00002-of-00003.safetensors");
  expect_format_error(
      [&] { load_hf_model(m.dir()); },
      {"model.safetensors.index.json", "missing shard", "model-00002-of-00003.safetensors"});
}

TEST(HfModel, NoWeightsAtAll) {
  ModelCopy m("qwen2_tiny");
  fs::remove(m / "model.safetensors");
  expect_format_error([&] { load_hf_model(m.dir()); }, {"no weights", "model.safetensors"});
}

TEST(HfModel, IntegerWeightsAreRejected) {
  ModelCopy m("qwen2_tiny");
  m.rewrite("model.safetensors", [](auto& names, auto& raws) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "model.norm.weight") raws[i].type = ElemType::i32;  // same byte count
    }
  });
  expect_format_error([&] { load_hf_model(m.dir()); },
                      {"model.norm.weight", "I32", "F32, F16 or BF16"});
}

TEST(HfModel, SessionOfAnotherConfigIsRejected) {
  const HfModel qwen = load_hf_model(kLm / "models/qwen2_tiny");
  const HfModel llama = load_hf_model(kLm / "models/llama_tied");
  CausalLmOptions o;
  o.sequence = 4;
  CausalLm lm = build_causal_lm(llama.config, o);
  auto session = build_session(*lm.graph);
  EXPECT_THROW(load_weights(*session, qwen), Error);
}

// Parameters stored as bf16 or f16 from files of any float dtype: the uploaded values are the
// file's values rounded once to the storage dtype.
TEST(HfModel, StorageDtypesRoundFileValuesOnce) {
  const HfModel model = load_hf_model(kLm / "models/llama_tied");  // f32 file
  for (DType dtype : {DType::bf16, DType::f16}) {
    CausalLmOptions o;
    o.sequence = 4;
    o.dtype = dtype;
    CausalLm lm = build_causal_lm(model.config, o);
    auto session = build_session(*lm.graph);
    load_weights(*session, model);
    const std::string name = "model.layers.1.mlp.down_proj.weight";
    const RawTensor file = model.tensors.at(name).reader->raw(name);
    const Array got = session->get(name);
    ASSERT_EQ(got.dtype, dtype);
    for (int64_t i = 0; i < file.numel(); ++i) {
      const double v = file.value(i);
      const double want = dtype == DType::bf16 ? bf16_value(bf16_bits(v)) : f16_value(f16_bits(v));
      ASSERT_EQ(got.data[static_cast<size_t>(i)], want) << dtype_name(dtype) << " element " << i;
    }
  }
}

// A bf16 checkpoint kept in bf16 (and an f16 one in f16) computes what transformers computes in
// f32 from the same values.
TEST(HfModel, NarrowStorageMatchesTransformers) {
  for (const auto& [name, dtype] :
       {std::pair{"llama_bf16_sharded", DType::bf16}, std::pair{"qwen3_tiny", DType::f16}}) {
    const HfModel model = load_hf_model(kLm / "models" / name);
    const Array ids = reference_array(name, "input_ids");
    CausalLmOptions o;
    o.batch = ids.shape[0];
    o.sequence = ids.shape[1];
    o.dtype = dtype;
    CausalLm lm = build_causal_lm(model.config, o);
    auto session = build_session(*lm.graph);
    load_weights(*session, model);
    session->set("input_ids", ids);
    session->step();
    EXPECT_LE(testing::scaled_error(session->get("logits"), reference_array(name, "logits")), 1e-4) << name;
  }
}

// Positions given as an input: 0..L-1 reproduce transformers; a common offset changes nothing
// (attention sees only relative positions); all-zero positions do change the logits.
TEST(HfModel, PositionsInput) {
  const std::string name = "llama_bf16_sharded";
  const HfModel model = load_hf_model(kLm / "models" / name);
  const Array ids = reference_array(name, "input_ids"), want = reference_array(name, "logits");
  CausalLmOptions o;
  o.batch = ids.shape[0];
  o.sequence = ids.shape[1];
  o.with_positions = true;
  CausalLm lm = build_causal_lm(model.config, o);
  auto session = build_session(*lm.graph);
  load_weights(*session, model);
  session->set("input_ids", ids);
  auto logits_at = [&](int64_t offset, bool zero) {
    Array pos(ids.shape, DType::i32);
    for (size_t i = 0; i < pos.data.size(); ++i)
      pos.data[i] = zero ? 0.0 : static_cast<double>(offset + static_cast<int64_t>(i) % o.sequence);
    session->set("positions", pos);
    session->step();
    return session->get("logits");
  };
  EXPECT_LE(testing::scaled_error(logits_at(0, false), want), 1e-4);
  EXPECT_LE(testing::scaled_error(logits_at(7, false), want), 1e-4);
  EXPECT_GT(testing::scaled_error(logits_at(0, true), want), 1e-2);
}

TEST(HfModel, SaveAndReload) {
  const HfModel model = load_hf_model(kLm / "models/llama_bf16_sharded");
  CausalLmOptions o;
  o.sequence = 4;
  CausalLm lm = build_causal_lm(model.config, o);
  auto session = build_session(*lm.graph);
  load_weights(*session, model);
  test::ScratchDir scratch;
  const fs::path out = scratch / "saved";
  HfSaveOptions so;
  so.dtype = DType::bf16;
  so.generation = model.generation;
  so.tokenizer_dir = model.dir;
  save_hf_model(out, *session, model.config, so);
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(out / "tokenizer_config.json"));
  EXPECT_EQ(scratch.listing(), std::vector<std::string>{"saved"});  // no staging left behind
  const HfModel back = load_hf_model(out);
  EXPECT_EQ(back.config.torch_dtype, "bfloat16");
  EXPECT_EQ(back.config.rope_scaling->factor, model.config.rope_scaling->factor);
  EXPECT_EQ(back.generation.eos_token_id, model.generation.eos_token_id);
  ASSERT_EQ(back.tensors.size(), model.tensors.size());
  for (const auto& [name, t] : model.tensors) {
    const HfTensor& b = back.tensors.at(name);
    EXPECT_EQ(b.entry.type, ElemType::bf16) << name;
    EXPECT_EQ(b.reader->raw(name).bytes, t.reader->raw(name).bytes) << name;  // bf16 both ways
  }
}

TEST(HfModel, FailedSaveLeavesThePreviousDirectory) {
  const HfModel model = load_hf_model(kLm / "models/llama_tied");
  CausalLmOptions o;
  o.sequence = 4;
  CausalLm lm = build_causal_lm(model.config, o);
  auto session = build_session(*lm.graph);
  test::ScratchDir scratch;
  const fs::path out = scratch / "saved";
  save_hf_model(out, *session, model.config);
  const std::vector<uint8_t> before = test::read_bytes(out / "model.safetensors");
  load_weights(*session, model);  // different values from the random initialization
  HfSaveOptions so;
  so.tokenizer_dir = scratch / "no-such-dir";
  EXPECT_THROW(save_hf_model(out, *session, model.config, so), Error);
  EXPECT_EQ(test::read_bytes(out / "model.safetensors"), before);
  EXPECT_EQ(scratch.listing(), std::vector<std::string>{"saved"});
  save_hf_model(out.string() + "/", *session, model.config);  // replaces it
  EXPECT_NE(test::read_bytes(out / "model.safetensors"), before);
  EXPECT_EQ(scratch.listing(), std::vector<std::string>{"saved"});
}

}  // namespace
}  // namespace mn
