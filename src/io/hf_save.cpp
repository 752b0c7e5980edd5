// Writing a Hugging Face directory from a Session's parameters: built beside the target and
// swapped into place, so readers see the old directory or the complete new one.
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <meganeura/error.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

#include "data/atomic_file.h"
#include "runtime/host_tensor.h"

namespace mn {

namespace fs = std::filesystem;

namespace {

// The files of a tokenizer that transformers and tokenizers read, whichever exist.
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
};

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    default:
      throw Error(std::string("save_hf_model: weights are saved as f32, f16 or bf16, not ") +
                  dtype_name(t));
  }
}

void write_text(const fs::path& path, const std::string& text) {
  data::AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

void write_weights(const fs::path& path, const Session& session, const LmConfig& config,
                   DType dtype) {
  const std::vector<ParameterSpec> params = lm_parameters(config);
  std::vector<TensorView> views;
  for (const ParameterSpec& p : params) {
    const TensorType have = session.type_of(p.name);  // mn::Error naming it when absent
    if (have.shape != p.shape) {
      throw Error("save_hf_model: parameter '" + p.name + "' is " + have.str() +
                  " in the session, but the config gives " + shape_str(p.shape));
    }
    views.push_back({p.name, elem_type_for(dtype), p.shape, {}});
  }
  write_safetensors(path, views, {{"format", "pt"}}, [&](size_t i, std::span<uint8_t> out) {
    const Array a = session.get(params[i].name);
    runtime::encode(std::span<const double>(a.data), dtype, std::as_writable_bytes(out));
  });
}

void copy_tokenizer(const fs::path& from, const fs::path& to) {
  if (from.empty()) return;
  if (!fs::is_directory(from))
    throw Error("save_hf_model: the tokenizer directory " + from.string() + " does not exist");
  for (const char* name : kTokenizerFiles) {
    if (fs::exists(from / name)) fs::copy_file(from / name, to / name);
  }
}

// Puts `staged` at `target`: an atomic exchange when a previous directory is there (which is
// then removed), a rename otherwise.
void swap_into_place(const fs::path& staged, const fs::path& target) {
  if (fs::exists(target)) {
    if (!fs::is_directory(target))
      throw Error("save_hf_model: " + target.string() + " exists and is not a directory");
    if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      throw Error("save_hf_model: cannot replace " + target.string() + ": " + std::strerror(errno));
    std::error_code ec;
    fs::remove_all(staged, ec);  // the previous directory now; a leftover is harmless
    return;
  }
  fs::rename(staged, target);
}

}  // namespace

void save_hf_model(const fs::path& out_dir, const Session& session, const LmConfig& config,
                   const HfSaveOptions& options) {
  fs::path target = fs::absolute(out_dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" names "out"
  const fs::path staged = target.parent_path() /
                          ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  LmConfig saved = config;
  saved.torch_dtype = torch_dtype_name(options.dtype);
  try {
    fs::create_directories(target.parent_path());
    fs::remove_all(staged);
    fs::create_directory(staged);
    write_text(staged / "config.json", lm_config_json(saved));
    GenerationConfig gen = options.generation.value_or(GenerationConfig{});
    if (!options.generation) {
      gen.eos_token_id = config.eos_token_id;
      if (config.bos_token_id.size() == 1) gen.bos_token_id = config.bos_token_id[0];
    }
    write_text(staged / "generation_config.json", generation_config_json(gen));
    write_weights(staged / "model.safetensors", session, config, options.dtype);
    copy_tokenizer(options.tokenizer_dir, staged);
    swap_into_place(staged, target);
  } catch (const fs::filesystem_error& err) {
    std::error_code ec;
    fs::remove_all(staged, ec);
    throw Error("save_hf_model " + target.string() + ": " + err.what());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staged, ec);
    throw;
  }
}

}  // namespace mn
