// LoRA adapters out of a training session: PEFT's adapter directory, or the base weights with
// the adapters merged in.
#include <filesystem>

#include <nlohmann/json.hpp>

#include <meganeura/error.h>
#include <meganeura/finetune.h>
#include <meganeura/session.h>

#include "data/atomic_file.h"

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

std::map<std::string, Array> merged_lora_parameters(const Session& session, const LmConfig& config,
                                                    const LoraOptions& lora) {
  std::map<std::string, Array> out;
  for (const ParameterSpec& p : lm_parameters(config)) out[p.name] = session.get(p.name);
  const double scale = lora.scale();
  for (const std::string& proj : adapted_projections(session)) {
    const Array a = session.get(proj + ".lora_A.weight");  // [r, in]
    const Array b = session.get(proj + ".lora_B.weight");  // [out, r]
    Array& w = out.at(proj + ".weight");                   // [out, in]
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
  return out;
}

}  // namespace mn
