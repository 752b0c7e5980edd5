// LoRA adapters and PEFT's adapter directory: saving a session's adapters, loading them back,
// and the base weights with the adapters merged in.
#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include <meganeura/error.h>
#include <meganeura/finetune.h>
#include <meganeura/session.h>

#include "data/atomic_file.h"
#include "io/json_fields.h"

namespace mn {

namespace fs = std::filesystem;

namespace {

const std::string kPeftPrefix = "base_model.model.";

// The adapted projections of the session: "model.layers.N.self_attn.q_proj", ...
std::vector<std::string> adapted_projections(const Session& session) {
  std::vector<std::string> out;
  const std::string tail = ".lora_A.weight";
  for (const std::string& name : session.parameter_names()) {
    if (name.size() > tail.size() &&
        name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      out.push_back(name.substr(0, name.size() - tail.size()));
  }
  if (out.empty()) throw Error("LoRA: the session has no adapters");
  return out;
}

void write_text(const fs::path& path, const std::string& text) {
  data::AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace

void save_lora_adapter(const fs::path& dir, const Session& session, const LmConfig& config,
                       const LoraOptions& lora, const std::string& base_model) {
  std::map<std::string, Array> tensors;
  for (const std::string& p : adapted_projections(session)) {
    for (const char* ab : {".lora_A.weight", ".lora_B.weight"}) {
      Array a = session.get(p + ab);
      a.dtype = DType::f32;
      tensors[kPeftPrefix + p + ab] = std::move(a);
    }
  }
  const nlohmann::json cfg = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", lora.rank},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", 0.0},
      {"bias", "none"},
      {"target_modules", lora.targets},
      {"base_model_name_or_path", base_model},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"use_rslora", false},
      {"modules_to_save", nullptr},
      {"revision", nullptr},
      {"auto_mapping", nullptr},
  };
  try {
    fs::create_directories(dir);
  } catch (const fs::filesystem_error& e) {
    throw Error("save_lora_adapter: cannot create " + dir.string() + ": " + e.what());
  }
  write_text(dir / "adapter_config.json", cfg.dump(2) + "\n");
  save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
}

LoraOptions load_lora_config(const fs::path& dir) {
  const fs::path file = dir / "adapter_config.json";
  const io::JsonFields cfg(io::read_text_file(file), file.string());
  const auto type = cfg.optional_string("peft_type");
  if (type != "LORA") cfg.fail("peft_type", "must be \"LORA\", got " + type.value_or("nothing"));
  LoraOptions lora;
  lora.rank = cfg.required_int("r");
  if (lora.rank <= 0) cfg.fail("r", "must be positive, got " + std::to_string(lora.rank));
  lora.alpha = cfg.optional_number("lora_alpha").value_or(8.0);  // PEFT's default
  const nlohmann::json& targets = cfg.object().value("target_modules", nlohmann::json());
  if (!targets.is_array() || targets.empty())
    cfg.fail("target_modules", "must be a non-empty list of projection names");
  lora.targets.clear();
  for (const auto& t : targets) {
    if (!t.is_string()) cfg.fail("target_modules", "must hold strings");
    lora.targets.push_back(t.get<std::string>());
  }
  return lora;
}

void load_lora_adapter(Session& session, const fs::path& dir) {
  const fs::path file = dir / "adapter_model.safetensors";
  SafetensorsReader reader(file);
  std::vector<std::string> wanted;
  for (const std::string& n : session.parameter_names()) {
    if (is_lora_parameter(n)) wanted.push_back(n);
  }
  if (wanted.empty()) throw Error("load_lora_adapter: the session has no LoRA adapters");
  if (reader.entries().size() != wanted.size()) {
    throw FormatError(file.string() + ": holds " + std::to_string(reader.entries().size()) +
                      " tensors, the session has " + std::to_string(wanted.size()) + " adapters");
  }
  for (const std::string& n : wanted) {
    const std::string peft = kPeftPrefix + n;
    if (!reader.contains(peft)) throw FormatError(file.string() + ": lacks tensor '" + peft + "'");
    const Shape& shape = reader.entry(peft).shape;
    const TensorType want = session.type_of(n);
    if (shape != want.shape) {
      throw FormatError(file.string() + ": tensor '" + peft + "' has shape " + shape_str(shape) +
                        ", but the session's adapter is " + want.str());
    }
    session.set(n, reader.array(peft));
  }
}

namespace {

// w [out, in] += scale · b [out, r] · a [r, in].
void add_low_rank(Array& w, const Array& b, const Array& a, double scale) {
  const int64_t rows = w.shape[0], cols = w.shape[1], r = a.shape[0];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < r; ++k)
        acc += b.data[static_cast<size_t>(i * r + k)] * a.data[static_cast<size_t>(k * cols + j)];
      w.data[static_cast<size_t>(i * cols + j)] += scale * acc;
    }
  }
}

// The projection of a decoder-layer weight the configuration targets ("model.layers.N.
// self_attn.q_proj" for its ".weight"), or empty.
std::string targeted_projection(const std::string& weight, const LoraOptions& lora) {
  const std::string tail = ".weight";
  if (weight.rfind("model.layers.", 0) != 0 || weight.size() <= tail.size() ||
      weight.compare(weight.size() - tail.size(), tail.size(), tail) != 0) {
    return {};
  }
  const std::string proj = weight.substr(0, weight.size() - tail.size());
  const std::string module = proj.substr(proj.rfind('.') + 1);
  const auto& t = lora.targets;
  return std::find(t.begin(), t.end(), module) != t.end() ? proj : std::string();
}

}  // namespace

void merge_lora_adapter(Session& session, const LmConfig& config, const fs::path& dir) {
  const LoraOptions lora = load_lora_config(dir);
  const fs::path file = dir / "adapter_model.safetensors";
  SafetensorsReader reader(file);
  std::set<std::string> used;
  for (const ParameterSpec& p : lm_parameters(config)) {
    const std::string proj = targeted_projection(p.name, lora);
    if (proj.empty()) continue;
    const int64_t out = p.shape.at(0), in = p.shape.at(1);
    auto matrix = [&](const char* which, const Shape& want) {
      const std::string name = kPeftPrefix + proj + which;
      if (!reader.contains(name)) throw FormatError(file.string() + ": lacks tensor '" + name + "'");
      if (reader.entry(name).shape != want) {
        throw FormatError(file.string() + ": tensor '" + name + "' has shape " +
                          shape_str(reader.entry(name).shape) + ", the model's rank-" +
                          std::to_string(lora.rank) + " adapter is " + shape_str(want));
      }
      used.insert(name);
      return reader.array(name);
    };
    const Array a = matrix(".lora_A.weight", {lora.rank, in});
    const Array b = matrix(".lora_B.weight", {out, lora.rank});
    Array w = session.get(p.name);
    add_low_rank(w, b, a, lora.scale());
    session.set(p.name, w);
  }
  for (const SafetensorsEntry& e : reader.entries()) {
    if (!used.count(e.name)) {
      throw FormatError(file.string() + ": tensor '" + e.name +
                        "' adapts no projection of this model that adapter_config.json targets");
    }
  }
}

std::map<std::string, Array> merged_lora_parameters(const Session& session, const LmConfig& config,
                                                    const LoraOptions& lora) {
  std::map<std::string, Array> out;
  for (const ParameterSpec& p : lm_parameters(config)) out[p.name] = session.get(p.name);
  const double scale = lora.scale();
  for (const std::string& proj : adapted_projections(session)) {
    const Array a = session.get(proj + ".lora_A.weight");  // [r, in]
    const Array b = session.get(proj + ".lora_B.weight");  // [out, r]
    add_low_rank(out.at(proj + ".weight"), b, a, scale);  // [out, in]
  }
  return out;
}

}  // namespace mn
