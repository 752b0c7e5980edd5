// config.json and generation_config.json: both spellings transformers writes, the defaults its
// config classes give, and an error naming the file and field for everything unsupported.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/causal_lm.h>
#include <meganeura/error.h>
#include <meganeura/hf.h>

namespace mn {
namespace {

using nlohmann::json;

json llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 100},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"tie_word_embeddings", true},
          {"torch_dtype", "bfloat16"},
          {"bos_token_id", 1},
          {"eos_token_id", {2, 3}}};
}

LmConfig parse(const json& j) { return parse_lm_config(j.dump(), "dir/config.json"); }

// Parsing `j` throws FormatError whose message contains every one of `parts`.
void expect_error(const json& j, const std::vector<std::string>& parts) {
  try {
    parse(j);
    ADD_FAILURE() << "no error for " << j.dump();
  } catch (const FormatError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(HfConfig, ParsesLlamaWithDefaults) {
  const LmConfig c = parse(llama());
  EXPECT_EQ(c.architecture, LmArchitecture::llama);
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 8);  // hidden / heads
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_FALSE(c.rope_scaling);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_FALSE(c.qk_norm());
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, std::vector<int64_t>{1});
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c.max_position_embeddings, 2048);
}

TEST(HfConfig, KeyValueHeadsDefaultToHeads) {
  json j = llama();
  j.erase("num_key_value_heads");
  EXPECT_EQ(parse(j).num_key_value_heads, 4);
}

TEST(HfConfig, Qwen2HasQkvBiasesAndQwen3ExplicitHeadDimAndNorms) {
  json q2 = llama();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  q2["attention_bias"] = false;  // not a Qwen2 field: its q/k/v biases are always there
  const LmConfig c2 = parse(q2);
  EXPECT_TRUE(c2.qkv_bias());
  EXPECT_FALSE(c2.o_bias());
  json q3 = llama();
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3["head_dim"] = 16;  // not hidden / heads
  const LmConfig c3 = parse(q3);
  EXPECT_EQ(c3.head_dim, 16);
  EXPECT_TRUE(c3.qk_norm());
  EXPECT_FALSE(c3.qkv_bias());
}

TEST(HfConfig, ReadsLlama3ScalingInBothSpellings) {
  const json scaling = {{"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  json v4 = llama();
  v4["rope_scaling"] = scaling;
  v4["rope_scaling"]["rope_type"] = "llama3";
  json v5 = llama();
  v5.erase("rope_theta");
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["type"] = "llama3";
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  for (const json& j : {v4, v5}) {
    const LmConfig c = parse(j);
    ASSERT_TRUE(c.rope_scaling);
    EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 8.0);
    EXPECT_EQ(c.rope_scaling->original_max_position, 8192);
    EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  }
}

// Llama 3's rule, frequency by frequency: wavelengths beyond original/low_freq_factor slow down
// by `factor`, those below original/high_freq_factor stay, the ones between interpolate.
TEST(HfConfig, Llama3InverseFrequencies) {
  json j = llama();
  j["hidden_size"] = 128;  // head_dim 32: 16 frequencies spanning all three bands
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 64}};
  const LmConfig c = parse(j);
  const std::vector<double> inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 16u);
  int kept = 0, slowed = 0, blended = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double plain = std::pow(500000.0, -2.0 * static_cast<double>(i) / 32.0);
    const double wavelen = 2 * std::numbers::pi / plain;
    if (wavelen < 16.0) {
      EXPECT_DOUBLE_EQ(inv[i], plain) << i;
      ++kept;
    } else if (wavelen > 64.0) {
      EXPECT_DOUBLE_EQ(inv[i], plain / 8.0) << i;
      ++slowed;
    } else {
      EXPECT_GT(inv[i], plain / 8.0) << i;
      EXPECT_LT(inv[i], plain) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(blended, 0);
}

TEST(HfConfig, UnknownArchitectureListsTheSupportedOnes) {
  json j = llama();
  j["architectures"] = {"MistralForCausalLM"};
  expect_error(j, {"dir/config.json", "MistralForCausalLM", "LlamaForCausalLM", "Qwen2ForCausalLM",
                   "Qwen3ForCausalLM"});
}

TEST(HfConfig, MissingOrMistypedFieldsNameFileAndField) {
  json missing = llama();
  missing.erase("hidden_size");
  expect_error(missing, {"dir/config.json", "\"hidden_size\"", "missing"});
  json mistyped = llama();
  mistyped["num_hidden_layers"] = "two";
  expect_error(mistyped, {"dir/config.json", "\"num_hidden_layers\"", "integer"});
  // A depth no model has (the fuzzer's 333333336 layers exhausted memory naming parameters).
  json deep = llama();
  deep["num_hidden_layers"] = 333333336;
  expect_error(deep, {"dir/config.json", "\"num_hidden_layers\"", "at most 4096", "333333336"});
  json flag = llama();
  flag["tie_word_embeddings"] = 1;
  expect_error(flag, {"\"tie_word_embeddings\"", "true or false"});
  json no_arch = llama();
  no_arch.erase("architectures");
  expect_error(no_arch, {"\"architectures\"", "missing"});
}

// Integers past int64, written as integers or as floats, are refused (converting such a float
// to int64 is undefined; an unsigned one would wrap).
TEST(HfConfig, IntegersPastInt64AreErrors) {
  for (const char* big : {"2.1e53", "9223372036854775808", "18446744073709551615", "-1e19"}) {
    SCOPED_TRACE(big);
    json j = llama();
    j["hidden_size"] = json::parse(big);
    expect_error(j, {"\"hidden_size\"", "integer (within int64)"});
    for (const std::string key : {"top_k", "eos_token_id"}) {
      try {
        parse_generation_config("{\"" + key + "\": " + big + "}", "g.json");
        ADD_FAILURE() << key << " accepted";
      } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("within int64"), std::string::npos) << e.what();
      }
    }
  }
  // Sizes fit i32 (ids and positions are i32).
  json wide = llama();
  wide["head_dim"] = 16555555555554;
  expect_error(wide, {"\"head_dim\"", "at most 2147483647"});
  json ok = llama();
  ok["hidden_size"] = 64.0;  // an integral float is an integer
  EXPECT_EQ(parse_lm_config(ok.dump()).hidden_size, 64);
}

TEST(HfConfig, SizesMustBePositiveAndHeadsDivide) {
  json zero = llama();
  zero["vocab_size"] = 0;
  expect_error(zero, {"\"vocab_size\"", "positive"});
  json kv = llama();
  kv["num_key_value_heads"] = 3;
  expect_error(kv, {"\"num_key_value_heads\"", "divide"});
  json hidden = llama();
  hidden["num_attention_heads"] = 5;
  hidden["num_key_value_heads"] = 5;
  expect_error(hidden, {"\"num_attention_heads\"", "hidden_size"});
  json odd = llama();
  odd["head_dim"] = 7;
  expect_error(odd, {"\"head_dim\"", "even"});
}

TEST(HfConfig, UnsupportedFeaturesAreErrors) {
  json sliding = llama();
  sliding["architectures"] = {"Qwen2ForCausalLM"};
  sliding["use_sliding_window"] = true;
  expect_error(sliding, {"\"use_sliding_window\"", "not supported"});
  json act = llama();
  act["hidden_act"] = "gelu";
  expect_error(act, {"\"hidden_act\"", "gelu"});
  json yarn = llama();
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(yarn, {"\"rope_scaling.rope_type\"", "yarn"});
  json partial = llama();
  partial["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error(partial, {"\"rope_scaling.low_freq_factor\"", "missing"});
  // A context past int64 (or any size past i32) is refused, not converted.
  for (const double context : {6.5e42, 3e9, 8192.5}) {
    json huge = llama();
    huge["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", context}};
    expect_error(huge, {"\"rope_scaling.original_max_position_embeddings\""});
  }
  EXPECT_THROW(parse_lm_config("{not json", "dir/config.json"), FormatError);
  EXPECT_THROW(parse_lm_config("[1, 2]", "dir/config.json"), FormatError);
}

TEST(HfConfig, JsonRoundTripKeepsUnmodelledFields) {
  json j = llama();
  j["initializer_range"] = 0.02;
  LmConfig c = parse(j);
  c.torch_dtype = "float32";
  const json out = json::parse(lm_config_json(c));
  EXPECT_EQ(out["initializer_range"], 0.02);
  EXPECT_EQ(out["torch_dtype"], "float32");
  const LmConfig back = parse(out);
  EXPECT_EQ(back.hidden_size, c.hidden_size);
  EXPECT_EQ(back.eos_token_id, c.eos_token_id);
  EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
}

TEST(HfConfig, GenerationConfig) {
  const GenerationConfig g = parse_generation_config(
      R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 20,
          "eos_token_id": [128001, 128009], "bos_token_id": 128000, "max_new_tokens": 64})");
  EXPECT_TRUE(g.do_sample);
  EXPECT_DOUBLE_EQ(g.temperature, 0.6);
  EXPECT_DOUBLE_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.eos_token_id, (std::vector<int64_t>{128001, 128009}));
  EXPECT_EQ(g.bos_token_id, 128000);
  EXPECT_EQ(g.max_new_tokens, 64);
  EXPECT_FALSE(g.pad_token_id);
  const GenerationConfig d = parse_generation_config("{}");
  EXPECT_FALSE(d.do_sample);
  EXPECT_EQ(d.top_k, 50);
  EXPECT_THROW(parse_generation_config(R"({"top_p": 0})", "g.json"), FormatError);
  EXPECT_THROW(parse_generation_config(R"({"eos_token_id": "x"})", "g.json"), FormatError);
}

TEST(HfConfig, ParameterNamesAndShapes) {
  json j = llama();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["tie_word_embeddings"] = false;
  j["num_hidden_layers"] = 1;
  std::vector<std::string> names;
  for (const auto& p : lm_parameters(parse(j))) names.push_back(p.name);
  const std::vector<std::string> want{"model.embed_tokens.weight",
                                      "model.layers.0.self_attn.q_proj.weight",
                                      "model.layers.0.self_attn.k_proj.weight",
                                      "model.layers.0.self_attn.v_proj.weight",
                                      "model.layers.0.self_attn.o_proj.weight",
                                      "model.layers.0.self_attn.q_norm.weight",
                                      "model.layers.0.self_attn.k_norm.weight",
                                      "model.layers.0.mlp.gate_proj.weight",
                                      "model.layers.0.mlp.up_proj.weight",
                                      "model.layers.0.mlp.down_proj.weight",
                                      "model.layers.0.input_layernorm.weight",
                                      "model.layers.0.post_attention_layernorm.weight",
                                      "model.norm.weight",
                                      "lm_head.weight"};
  EXPECT_EQ(names, want);
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

TEST(CausalLmBuilder, ParametersAreExactlyTheConfigs) {
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    json j = llama();
    j["architectures"] = {arch};
    j["tie_word_embeddings"] = std::string(arch) != "Qwen2ForCausalLM";
    const LmConfig c = parse(j);
    CausalLmOptions o;
    o.sequence = 3;
    o.dtype = DType::bf16;
    CausalLm lm = build_causal_lm(c, o);
    std::map<std::string, TensorType> have;
    for (NodeId id : lm.graph->parameters()) {
      const Node& n = lm.graph->node(id);
      have[n.name] = n.type;
    }
    std::map<std::string, TensorType> want;
    for (const ParameterSpec& p : lm_parameters(c)) want[p.name] = {p.shape, DType::bf16};
    EXPECT_EQ(have, want) << arch;
    EXPECT_EQ(lm.logits.type(), (TensorType{{1, 3, 100}, DType::f32}));
  }
}

TEST(CausalLmBuilder, RejectsBadOptions) {
  const LmConfig c = parse(llama());
  CausalLmOptions o;
  o.sequence = 0;
  EXPECT_THROW(build_causal_lm(c, o), Error);
  o.sequence = 1;
  o.with_loss = true;  // no next token to predict
  EXPECT_THROW(build_causal_lm(c, o), Error);
  o.with_loss = false;
  o.dtype = DType::i32;
  EXPECT_THROW(build_causal_lm(c, o), Error);
  LmConfig bad = c;
  bad.num_key_value_heads = 3;
  EXPECT_THROW(build_causal_lm(bad, {}), Error);
}

}  // namespace
}  // namespace mn
