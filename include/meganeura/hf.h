#pragma once
// Hugging Face model directories of decoder-only language models (Llama, Qwen2, Qwen3):
// config.json, generation_config.json, model.safetensors or sharded
// model.safetensors.index.json, and the tokenizer files beside them.
//
// Every malformed or missing file raises mn::FormatError naming the file and the field or tensor
// that was wrong; a weight that does not fit the graph (missing, extra, wrong shape) too.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <meganeura/data.h>
#include <meganeura/dtype.h>
#include <meganeura/graph.h>  // ops.h: Llama3RopeScaling

namespace mn {

class Session;

enum class LmArchitecture : uint8_t { llama, qwen2, qwen3 };
// "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM".
const char* architecture_name(LmArchitecture a);

// config.json of a causal language model. Fields absent from the file take the value
// transformers' config class gives them (noted below); the sizes and the architecture must be
// present.
struct LmConfig {
  LmArchitecture architecture = LmArchitecture::llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // absent: num_attention_heads
  int64_t head_dim = 0;             // absent: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;  // null or absent: plain RoPE
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama and Qwen3: biases on q/k/v/o_proj
  bool mlp_bias = false;        // Llama: biases on gate/up/down_proj
  std::string torch_dtype;      // as written ("float32", "bfloat16", ...), may be empty
  std::vector<int64_t> bos_token_id, eos_token_id;  // empty when absent or null
  // The file's text, so that saving keeps the fields this struct does not model.
  std::string json_text;

  // Which projections carry biases and norms, per architecture.
  bool qkv_bias() const { return architecture == LmArchitecture::qwen2 || attention_bias; }
  bool o_bias() const { return architecture != LmArchitecture::qwen2 && attention_bias; }
  bool qk_norm() const { return architecture == LmArchitecture::qwen3; }
};

// Parses config.json text; `file` names it in errors. Throws FormatError.
LmConfig parse_lm_config(const std::string& json_text, const std::string& file = "config.json");
LmConfig load_lm_config(const std::filesystem::path& config_json);
// The config as config.json text (the fields of json_text kept, ours written over them).
std::string lm_config_json(const LmConfig& config);

// generation_config.json: defaults for generation (transformers' defaults where absent).
struct GenerationConfig {
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;
  double top_p = 1.0;
  std::optional<int64_t> max_new_tokens;
  std::vector<int64_t> eos_token_id;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::string json_text;  // the file's text, empty when there was none
};
GenerationConfig parse_generation_config(const std::string& json_text,
                                         const std::string& file = "generation_config.json");
std::string generation_config_json(const GenerationConfig& config);

// Every parameter of the model a config describes, with its Hugging Face name and shape, in
// the order transformers declares them (embedding, layers, final norm, untied head).
struct ParameterSpec {
  std::string name;
  Shape shape;
};
// `prefix` is where the decoder lives ("model." in a causal LM, "model.text_model." in SmolVLM);
// the untied head is "lm_head.weight" in both.
std::vector<ParameterSpec> lm_parameters(const LmConfig& config,
                                         const std::string& prefix = "model.");

// Where each tensor of a directory's weights lives (single file or shards), headers read and
// validated on load; tensor data is read one tensor at a time when uploading.
struct HfTensor {
  std::filesystem::path file;
  SafetensorsEntry entry;
  std::shared_ptr<const SafetensorsReader> reader;  // the open file, shared by its tensors
};

struct HfModel {
  std::filesystem::path dir;
  LmConfig config;
  GenerationConfig generation;
  std::map<std::string, HfTensor> tensors;          // by Hugging Face name
  std::vector<std::filesystem::path> weight_files;  // the files searched, in order
};

// Reads config.json, generation_config.json when present, and the safetensors headers, and
// checks the tensors against the config: every parameter of lm_parameters() present with its
// shape and a float dtype (F32, F16, BF16), and no other tensor.
HfModel load_hf_model(const std::filesystem::path& dir);

// Uploads every parameter of the session's graph from the model's files, converting the file
// dtype to the parameter's storage dtype one tensor at a time. Throws FormatError for a
// parameter the files lack or whose shape differs, mn::Error when the session has no such
// parameter as a file tensor names. LoRA adapters (see is_lora_parameter) are left as they are.
void load_weights(Session& session, const HfModel& model);

struct HfSaveOptions {
  DType dtype = DType::f32;                    // the dtype of model.safetensors (f32, f16 or bf16)
  std::optional<GenerationConfig> generation;  // written when given
  // Where the tokenizer files (tokenizer.json, tokenizer_config.json, ...) are copied from.
  std::filesystem::path tokenizer_dir;
};

// Writes a Hugging Face directory: config.json (torch_dtype set to the saved dtype),
// generation_config.json, model.safetensors with the session's parameters under their Hugging
// Face names, and the tokenizer files. The directory appears complete or not at all: it is
// written beside `out_dir` and swapped into place, so a failure leaves any previous one intact.
void save_hf_model(const std::filesystem::path& out_dir, const Session& session,
                   const LmConfig& config, const HfSaveOptions& options = {});

}  // namespace mn
