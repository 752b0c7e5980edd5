// SmolVLM model directories: config.json (vision_config, text_config, the connector's scale
// factor and the image token), preprocessor_config.json, and the weights checked against the
// parameters the config implies.
#include <algorithm>
#include <optional>

#include <meganeura/error.h>
#include <meganeura/vlm.h>

#include "io/hf_files.h"
#include "io/json_fields.h"
#include "io/lm_config_fields.h"

namespace mn {

namespace fs = std::filesystem;
using io::JsonFields;
using nlohmann::json;

namespace {

constexpr std::array<const char*, 2> kArchitectures{"SmolVLMForConditionalGeneration",
                                                    "Idefics3ForConditionalGeneration"};

// The one name of config.json's "architectures", nullopt when it is not a list of one string.
std::optional<std::string> architecture_of(const json& config) {
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->size() != 1 || !(*it)[0].is_string())
    return std::nullopt;
  return (*it)[0].get<std::string>();
}

bool is_vlm_architecture(const std::string& name) {
  return std::find(kArchitectures.begin(), kArchitectures.end(), name) != kArchitectures.end();
}

std::string vlm_architecture(const JsonFields& f) {
  const std::optional<std::string> name = architecture_of(f.object());
  if (!name) f.fail("architectures", "must be a list of one name");
  if (is_vlm_architecture(*name)) return *name;
  f.fail("architectures", "names '" + *name + "'; supported: " + kArchitectures[0] + ", " +
                              kArchitectures[1]);
}

SmolVlmVisionConfig parse_vision(const JsonFields& v) {
  SmolVlmVisionConfig c;
  c.hidden_size = io::positive_size(v, "hidden_size", c.hidden_size);
  c.intermediate_size = io::positive_size(v, "intermediate_size", c.intermediate_size);
  c.num_hidden_layers = io::positive_size(v, "num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = io::positive_size(v, "num_attention_heads", c.num_attention_heads);
  c.num_channels = io::positive_size(v, "num_channels", c.num_channels);
  c.image_size = io::positive_size(v, "image_size", c.image_size);
  c.patch_size = io::positive_size(v, "patch_size", c.patch_size);
  c.layer_norm_eps = v.optional_number("layer_norm_eps").value_or(c.layer_norm_eps);
  if (!(c.layer_norm_eps > 0)) v.fail("layer_norm_eps", "must be positive");
  if (c.hidden_size % c.num_attention_heads != 0) {
    v.fail("num_attention_heads", "(" + std::to_string(c.num_attention_heads) +
                                      ") must divide hidden_size (" +
                                      std::to_string(c.hidden_size) + ")");
  }
  if (c.image_size % c.patch_size != 0) {
    v.fail("patch_size", "(" + std::to_string(c.patch_size) + ") must divide image_size (" +
                             std::to_string(c.image_size) + ")");
  }
  const std::string act = v.optional_string("hidden_act").value_or("gelu_pytorch_tanh");
  if (act == "gelu_pytorch_tanh") {
    c.hidden_act = GeluApprox::tanh;
  } else if (act == "gelu") {
    c.hidden_act = GeluApprox::none;
  } else {
    v.fail("hidden_act", "is '" + act + "'; supported: gelu_pytorch_tanh, gelu");
  }
  return c;
}

// text_config as a causal LM's config: a Llama (the only decoder SmolVLM has).
LmConfig parse_text(const JsonFields& top, const std::string& file) {
  std::optional<JsonFields> t = top.optional_object("text_config");
  if (!t) top.fail("text_config", "is missing");
  const std::string type = t->optional_string("model_type").value_or("llama");
  if (type != "llama") t->fail("model_type", "is '" + type + "'; SmolVLM's decoder is a llama");
  json text = t->object();
  text["architectures"] = {"LlamaForCausalLM"};
  LmConfig c = io::parse_lm_config_fields(JsonFields(text, file, "text_config."), text.dump());
  // The model ties its head as the top level says (transformers reads the text config's flag
  // when the top level has none).
  if (auto tie = top.optional_bool("tie_word_embeddings")) c.tie_word_embeddings = *tie;
  return c;
}

}  // namespace

int64_t SmolVlmConfig::image_seq_len() const {
  const int64_t side = vision.patches_per_side() / scale_factor;
  return side * side;
}

SmolVlmConfig parse_smolvlm_config(const std::string& json_text, const std::string& file) {
  JsonFields f(json_text, file);
  SmolVlmConfig c;
  c.json_text = json_text;
  c.architecture = vlm_architecture(f);
  if (auto v = f.optional_object("vision_config")) c.vision = parse_vision(*v);
  c.text = parse_text(f, file);
  c.scale_factor = io::positive_size(f, "scale_factor", c.scale_factor);
  const int64_t side = c.vision.patches_per_side();
  if (side % c.scale_factor != 0) {
    f.fail("scale_factor", "(" + std::to_string(c.scale_factor) + ") must divide the " +
                               std::to_string(side) + " patches per side of a frame");
  }
  c.image_token_id = f.optional_int("image_token_id").value_or(c.image_token_id);
  if (c.image_token_id < 0 || c.image_token_id >= c.text.vocab_size) {
    f.fail("image_token_id", "(" + std::to_string(c.image_token_id) +
                                 ") must be a token of the vocabulary of " +
                                 std::to_string(c.text.vocab_size));
  }
  return c;
}

bool is_smolvlm_dir(const fs::path& dir) {
  const fs::path config = dir / "config.json";
  if (!fs::is_regular_file(config)) return false;
  const json j = json::parse(io::read_text_file(config), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const std::optional<std::string> name = architecture_of(j);
  return name && is_vlm_architecture(*name);
}

SmolVlmImageProcessor parse_smolvlm_image_processor(const std::string& json_text,
                                                    const std::string& file) {
  JsonFields f(json_text, file);
  SmolVlmImageProcessor p;
  auto edge = [&f](const char* key, int64_t fallback) {
    std::optional<JsonFields> o = f.optional_object(key);
    if (!o) return fallback;
    if (!o->has("longest_edge")) o->fail("longest_edge", "is missing (height/width sizes are not supported)");
    return io::positive_size(*o, "longest_edge", fallback);
  };
  p.do_resize = f.optional_bool("do_resize").value_or(p.do_resize);
  p.longest_edge = edge("size", p.longest_edge);
  p.do_image_splitting = f.optional_bool("do_image_splitting").value_or(p.do_image_splitting);
  p.max_image_size = edge("max_image_size", p.max_image_size);
  p.do_rescale = f.optional_bool("do_rescale").value_or(p.do_rescale);
  p.rescale_factor = f.optional_number("rescale_factor").value_or(p.rescale_factor);
  p.do_normalize = f.optional_bool("do_normalize").value_or(p.do_normalize);
  auto triple = [&f](const char* key, std::array<double, 3>& out) {
    const json& j = f.object();
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (it->is_number()) {
      out.fill(it->get<double>());
    } else if (it->is_array() && it->size() == 3 && (*it)[0].is_number() &&
               (*it)[1].is_number() && (*it)[2].is_number()) {
      for (size_t i = 0; i < 3; ++i) out[i] = (*it)[i].get<double>();
    } else {
      f.fail(key, "must be a number or a list of 3 numbers, got " + it->dump());
    }
  };
  triple("image_mean", p.image_mean);
  triple("image_std", p.image_std);
  for (double s : p.image_std) {
    if (!(s != 0.0)) f.fail("image_std", "has a zero");
  }
  // PIL's resampling filters by number: 1 LANCZOS, 2 BILINEAR.
  const int64_t resample = f.optional_int("resample").value_or(1);
  if (resample == 1) {
    p.resample = Resample::lanczos;
  } else if (resample == 2) {
    p.resample = Resample::bilinear;
  } else {
    f.fail("resample", "is " + std::to_string(resample) + "; supported: 1 (LANCZOS), 2 (BILINEAR)");
  }
  return p;
}

std::vector<ParameterSpec> smolvlm_parameters(const SmolVlmConfig& c) {
  const SmolVlmVisionConfig& v = c.vision;
  const int64_t d = v.hidden_size;
  std::vector<ParameterSpec> out;
  const std::string e = "model.vision_model.embeddings.";
  out.push_back({e + "patch_embedding.weight", {d, v.num_channels, v.patch_size, v.patch_size}});
  out.push_back({e + "patch_embedding.bias", {d}});
  out.push_back({e + "position_embedding.weight", {v.patches_per_side() * v.patches_per_side(), d}});
  auto linear = [&out](const std::string& name, int64_t o, int64_t i) {
    out.push_back({name + ".weight", {o, i}});
    out.push_back({name + ".bias", {o}});
  };
  auto norm = [&out, d](const std::string& name) {
    out.push_back({name + ".weight", {d}});
    out.push_back({name + ".bias", {d}});
  };
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const std::string p = "model.vision_model.encoder.layers." + std::to_string(l) + ".";
    for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"})
      linear(p + "self_attn." + proj, d, d);
    norm(p + "layer_norm1");
    linear(p + "mlp.fc1", v.intermediate_size, d);
    linear(p + "mlp.fc2", d, v.intermediate_size);
    norm(p + "layer_norm2");
  }
  norm("model.vision_model.post_layernorm");
  out.push_back({"model.connector.modality_projection.proj.weight",
                 {c.text.hidden_size, d * c.scale_factor * c.scale_factor}});
  for (ParameterSpec& p : lm_parameters(c.text, "model.text_model.")) out.push_back(std::move(p));
  return out;
}

SmolVlmModel load_smolvlm(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw FormatError(dir.string() + ": not a directory");
  SmolVlmModel m;
  const fs::path config = dir / "config.json";
  m.config = parse_smolvlm_config(io::read_text_file(config), config.string());
  const fs::path processor = dir / "preprocessor_config.json";
  if (fs::exists(processor))
    m.processor = parse_smolvlm_image_processor(io::read_text_file(processor), processor.string());
  m.files.dir = dir;
  m.files.config = m.config.text;
  const fs::path gen = dir / "generation_config.json";
  if (fs::exists(gen))
    m.files.generation = parse_generation_config(io::read_text_file(gen), gen.string());
  io::add_weight_files(m.files);
  io::check_weight_files(m.files, smolvlm_parameters(m.config), m.config.architecture);
  return m;
}

}  // namespace mn
