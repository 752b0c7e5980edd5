// config.json and generation_config.json of Hugging Face causal language models.
#include <meganeura/error.h>
#include <meganeura/hf.h>

#include <array>
#include <cstdint>

#include "io/json_fields.h"
#include "io/lm_config_fields.h"

namespace mn {

namespace {

using io::JsonFields;
using nlohmann::json;

constexpr std::array<std::pair<LmArchitecture, const char*>, 3> kArchitectures{{
    {LmArchitecture::llama, "LlamaForCausalLM"},
    {LmArchitecture::qwen2, "Qwen2ForCausalLM"},
    {LmArchitecture::qwen3, "Qwen3ForCausalLM"},
}};

LmArchitecture parse_architecture(const JsonFields& f) {
  const json& j = f.object();
  auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) f.fail("architectures", "is missing");
  if (!it->is_array() || it->size() != 1 || !(*it)[0].is_string())
    f.fail("architectures", "must be a list of one name, got " + it->dump());
  const std::string name = (*it)[0].get<std::string>();
  std::string supported;
  for (const auto& [a, n] : kArchitectures) {
    if (name == n) return a;
    supported += (supported.empty() ? "" : ", ") + std::string(n);
  }
  f.fail("architectures",
         "names '" + name + "', which is not supported (supported: " + supported + ")");
}

Llama3RopeScaling parse_llama3(const JsonFields& r) {
  Llama3RopeScaling s;
  auto number = [&](const char* key) {
    auto v = r.optional_number(key);
    if (!v) r.fail(key, "is missing (llama3 rope scaling needs it)");
    if (!(*v > 0.0)) r.fail(key, "must be positive, got " + std::to_string(*v));
    return *v;
  };
  s.factor = number("factor");
  s.low_freq_factor = number("low_freq_factor");
  s.high_freq_factor = number("high_freq_factor");
  s.original_max_position = io::positive_size(r, "original_max_position_embeddings");
  if (!(s.high_freq_factor > s.low_freq_factor))
    r.fail("high_freq_factor", "must exceed low_freq_factor");
  return s;
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also holds the
// theta): null or "default" is plain RoPE, "llama3" the only scaling supported.
void parse_rope(const JsonFields& f, LmConfig& c) {
  if (auto t = f.optional_number("rope_theta")) c.rope_theta = *t;
  std::optional<JsonFields> r = f.optional_object("rope_parameters");
  if (!r) r = f.optional_object("rope_scaling");
  if (r) {
    if (auto t = r->optional_number("rope_theta")) c.rope_theta = *t;
    std::optional<std::string> type = r->optional_string("rope_type");
    if (!type) type = r->optional_string("type");
    if (!type) r->fail("rope_type", "is missing");
    if (*type == "llama3") {
      c.rope_scaling = parse_llama3(*r);
    } else if (*type != "default") {
      r->fail("rope_type", "is '" + *type + "'; supported: default, llama3");
    }
  }
  if (!(c.rope_theta > 0.0)) f.fail("rope_theta", "must be positive");
}

void parse_sizes(const JsonFields& f, LmConfig& c) {
  c.vocab_size = io::positive_size(f, "vocab_size");
  c.hidden_size = io::positive_size(f, "hidden_size");
  c.intermediate_size = io::positive_size(f, "intermediate_size");
  c.num_hidden_layers = io::positive_size(f, "num_hidden_layers");
  // Far past any model's depth (the largest have about 128 layers); a larger count would have
  // the builders name and allocate parameters for hundreds of millions of layers first.
  constexpr int64_t kMaxLayers = 4096;
  if (c.num_hidden_layers > kMaxLayers) {
    f.fail("num_hidden_layers", "must be at most " + std::to_string(kMaxLayers) + ", got " +
                                    std::to_string(c.num_hidden_layers));
  }
  c.num_attention_heads = io::positive_size(f, "num_attention_heads");
  c.num_key_value_heads = io::positive_size(f, "num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    f.fail("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) +
                                      ") must divide num_attention_heads (" +
                                      std::to_string(c.num_attention_heads) + ")");
  }
  if (!f.has("head_dim") && c.hidden_size % c.num_attention_heads != 0) {
    f.fail("num_attention_heads", "(" + std::to_string(c.num_attention_heads) +
                                      ") must divide hidden_size (" +
                                      std::to_string(c.hidden_size) + ") when head_dim is absent");
  }
  c.head_dim = io::positive_size(f, "head_dim", c.hidden_size / c.num_attention_heads);
  if (c.head_dim % 2 != 0)
    f.fail("head_dim", "must be even for the rotary embedding, got " + std::to_string(c.head_dim));
  c.max_position_embeddings = io::positive_size(f, "max_position_embeddings",
                                       c.architecture == LmArchitecture::llama ? 2048 : 32768);
}

void parse_unsupported(const JsonFields& f) {
  const std::string act = f.optional_string("hidden_act").value_or("silu");
  if (act != "silu") f.fail("hidden_act", "is '" + act + "'; only silu is supported");
  if (f.optional_bool("use_sliding_window").value_or(false))
    f.fail("use_sliding_window", "is true; sliding-window attention is not supported");
}

}  // namespace

const char* architecture_name(LmArchitecture a) {
  for (const auto& [k, n] : kArchitectures) {
    if (k == a) return n;
  }
  throw Error("architecture_name: unknown architecture " + std::to_string(static_cast<int>(a)));
}

LmConfig parse_lm_config(const std::string& json_text, const std::string& file) {
  return io::parse_lm_config_fields(JsonFields(json_text, file), json_text);
}

LmConfig io::parse_lm_config_fields(const JsonFields& f, const std::string& json_text) {
  LmConfig c;
  c.json_text = json_text;
  c.architecture = parse_architecture(f);
  parse_sizes(f, c);
  parse_unsupported(f);
  c.rms_norm_eps = f.optional_number("rms_norm_eps").value_or(1e-6);
  if (!(c.rms_norm_eps > 0.0)) f.fail("rms_norm_eps", "must be positive");
  parse_rope(f, c);
  c.tie_word_embeddings = f.optional_bool("tie_word_embeddings").value_or(false);
  // Qwen2 has q/k/v biases by construction and no attention_bias field to honor.
  if (c.architecture != LmArchitecture::qwen2)
    c.attention_bias = f.optional_bool("attention_bias").value_or(false);
  if (c.architecture == LmArchitecture::llama)
    c.mlp_bias = f.optional_bool("mlp_bias").value_or(false);
  c.torch_dtype =
      f.optional_string("torch_dtype").value_or(f.optional_string("dtype").value_or(""));
  c.bos_token_id = f.int_or_list("bos_token_id");
  c.eos_token_id = f.int_or_list("eos_token_id");
  return c;
}

LmConfig load_lm_config(const std::filesystem::path& config_json) {
  return parse_lm_config(io::read_text_file(config_json), config_json.string());
}

namespace {

json base_object(const std::string& text) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

json ids(const std::vector<int64_t>& v) {
  if (v.empty()) return nullptr;
  if (v.size() == 1) return v[0];
  return v;
}

}  // namespace

std::string lm_config_json(const LmConfig& c) {
  json j = base_object(c.json_text);
  j["architectures"] = {architecture_name(c.architecture)};
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (c.architecture != LmArchitecture::qwen2) j["attention_bias"] = c.attention_bias;
  if (c.architecture == LmArchitecture::llama) j["mlp_bias"] = c.mlp_bias;
  json scaling = nullptr;
  if (c.rope_scaling) {
    const Llama3RopeScaling& s = *c.rope_scaling;
    scaling = {{"rope_type", "llama3"},
               {"factor", s.factor},
               {"low_freq_factor", s.low_freq_factor},
               {"high_freq_factor", s.high_freq_factor},
               {"original_max_position_embeddings", s.original_max_position}};
  }
  if (j.contains("rope_parameters")) {
    json p = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
    p["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = p;
  } else {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = scaling;
  }
  if (!c.torch_dtype.empty()) j[j.contains("dtype") ? "dtype" : "torch_dtype"] = c.torch_dtype;
  j["bos_token_id"] = ids(c.bos_token_id);
  j["eos_token_id"] = ids(c.eos_token_id);
  return j.dump(2) + "\n";
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& file) {
  JsonFields f(json_text, file);
  GenerationConfig g;
  g.json_text = json_text;
  g.do_sample = f.optional_bool("do_sample").value_or(g.do_sample);
  g.temperature = f.optional_number("temperature").value_or(g.temperature);
  if (!(g.temperature >= 0.0)) f.fail("temperature", "must not be negative");
  g.top_k = f.optional_int("top_k").value_or(g.top_k);
  if (g.top_k < 0) f.fail("top_k", "must not be negative");
  g.top_p = f.optional_number("top_p").value_or(g.top_p);
  if (!(g.top_p > 0.0 && g.top_p <= 1.0)) f.fail("top_p", "must be in (0, 1]");
  g.max_new_tokens = f.optional_int("max_new_tokens");
  if (g.max_new_tokens && *g.max_new_tokens < 0) f.fail("max_new_tokens", "must not be negative");
  g.eos_token_id = f.int_or_list("eos_token_id");
  g.bos_token_id = f.optional_int("bos_token_id");
  g.pad_token_id = f.optional_int("pad_token_id");
  return g;
}

std::string generation_config_json(const GenerationConfig& g) {
  json j = base_object(g.json_text);
  j["do_sample"] = g.do_sample;
  j["temperature"] = g.temperature;
  j["top_k"] = g.top_k;
  j["top_p"] = g.top_p;
  if (g.max_new_tokens) j["max_new_tokens"] = *g.max_new_tokens;
  if (!g.eos_token_id.empty()) j["eos_token_id"] = ids(g.eos_token_id);
  if (g.bos_token_id) j["bos_token_id"] = *g.bos_token_id;
  if (g.pad_token_id) j["pad_token_id"] = *g.pad_token_id;
  return j.dump(2) + "\n";
}

std::vector<ParameterSpec> lm_parameters(const LmConfig& c, const std::string& prefix) {
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  const int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  std::vector<ParameterSpec> out{{prefix + "embed_tokens.weight", {c.vocab_size, H}}};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    auto linear = [&](const std::string& name, int64_t o, int64_t i, bool bias) {
      out.push_back({p + name + ".weight", {o, i}});
      if (bias) out.push_back({p + name + ".bias", {o}});
    };
    linear("self_attn.q_proj", q, H, c.qkv_bias());
    linear("self_attn.k_proj", kv, H, c.qkv_bias());
    linear("self_attn.v_proj", kv, H, c.qkv_bias());
    linear("self_attn.o_proj", H, q, c.o_bias());
    if (c.qk_norm()) {
      out.push_back({p + "self_attn.q_norm.weight", {D}});
      out.push_back({p + "self_attn.k_norm.weight", {D}});
    }
    linear("mlp.gate_proj", F, H, c.mlp_bias);
    linear("mlp.up_proj", F, H, c.mlp_bias);
    linear("mlp.down_proj", H, F, c.mlp_bias);
    out.push_back({p + "input_layernorm.weight", {H}});
    out.push_back({p + "post_attention_layernorm.weight", {H}});
  }
  out.push_back({prefix + "norm.weight", {H}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, H}});
  return out;
}

}  // namespace mn
