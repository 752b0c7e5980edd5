#include "finetune/finetune_checks.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <meganeura/error.h>

namespace mn::finetune {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "meganeura-finetune-1";

void positive(int64_t v, const char* option) {
  if (v <= 0)
    throw Error(std::string("fine-tuning: ") + option + " must be positive, got " +
                std::to_string(v));
}

// The nearest existing directory at or above `path` must accept a new file: a probe is created
// and removed there, so that a path that cannot be written fails now, not after training.
void check_writable(const fs::path& path, const char* option, bool is_dir) {
  const fs::path abs = fs::absolute(path).lexically_normal();
  std::error_code ec;
  if (fs::exists(abs, ec) && fs::is_directory(abs, ec) != is_dir) {
    throw Error(std::string("fine-tuning: ") + option + " " + path.string() + " exists and is " +
                (is_dir ? "not a directory" : "a directory"));
  }
  fs::path dir = is_dir && fs::exists(abs, ec) ? abs : abs.parent_path();
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path())
    dir = dir.parent_path();
  if (!fs::is_directory(dir, ec)) {
    throw Error(std::string("fine-tuning: ") + option + " " + path.string() +
                " cannot be written: " + dir.string() + " is not a directory");
  }
  const fs::path probe = dir / (".mn-write-probe-" + std::to_string(::getpid()));
  {
    std::ofstream f(probe);
    if (!f) {
      throw Error(std::string("fine-tuning: ") + option + " " + path.string() +
                  " cannot be written: no new file can be created in " + dir.string());
    }
  }
  fs::remove(probe, ec);
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The examples' count and an FNV-1a hash of their ids and labels: a checkpoint's data position
// means something only over the same examples.
std::string data_digest(const LmExamples& data) {
  uint64_t h = 14695981039346656037ULL;
  auto mix = [&h](const std::vector<int32_t>& v) {
    for (int32_t x : v) {
      for (int byte = 0; byte < 4; ++byte) {
        h ^= (static_cast<uint32_t>(x) >> (8 * byte)) & 0xFFu;
        h *= 1099511628211ULL;
      }
    }
  };
  mix(data.input_ids);
  mix(data.labels);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(data.count()) + " examples of " + std::to_string(data.sequence) +
         " tokens, hash " + hex;
}

}  // namespace

void check_options(const FinetuneOptions& o) {
  if (o.text.empty() == o.jsonl.empty())
    throw Error("fine-tuning: give exactly one data file, --text or --jsonl");
  if (o.sequence < 2) {
    throw Error("fine-tuning: --seq must be at least 2 (one token to predict from), got " +
                std::to_string(o.sequence));
  }
  positive(o.batch, "--batch");
  positive(o.epochs, "--epochs");
  if (o.steps < 0)
    throw Error("fine-tuning: --steps must be positive, got " + std::to_string(o.steps));
  if (o.checkpoint_every < 0)
    throw Error("fine-tuning: --checkpoint-every must be positive, got " +
                std::to_string(o.checkpoint_every));
  positive(o.optimizer.accumulate, "--accumulate");
  if (!(o.optimizer.lr > 0) || !std::isfinite(o.optimizer.lr))
    throw Error("fine-tuning: --lr must be positive, got " + number(o.optimizer.lr));
  if (o.optimizer.schedule.warmup < 0)
    throw Error("fine-tuning: --warmup must not be negative, got " +
                std::to_string(o.optimizer.schedule.warmup));
  if (!(o.optimizer.weight_decay >= 0))
    throw Error("fine-tuning: --weight-decay must not be negative, got " +
                number(o.optimizer.weight_decay));
  if (!(o.optimizer.clip_grad_norm >= 0))
    throw Error("fine-tuning: --clip-grad-norm must not be negative, got " +
                number(o.optimizer.clip_grad_norm));
  if (o.lora.rank < 0)
    throw Error("fine-tuning: --lora-rank must be positive, got " + std::to_string(o.lora.rank));
  if (o.merge_lora && !o.lora.enabled()) throw Error("fine-tuning: --merge-lora needs --lora-rank");
  if (o.dtype != DType::f32 && o.dtype != DType::bf16)
    throw Error(std::string("fine-tuning: --dtype must be f32 or bf16, got ") +
                dtype_name(o.dtype));
  if (!o.save.empty()) check_writable(o.save, "--save", true);
  if (!o.checkpoint.empty()) check_writable(o.checkpoint, "--checkpoint", false);
}

std::vector<std::pair<std::string, std::string>> resume_fields(const FinetuneOptions& o,
                                                               const LmConfig& c,
                                                               const LmExamples& data) {
  std::string targets;
  for (const std::string& t : o.lora.targets) targets += (targets.empty() ? "" : ",") + t;
  const std::string model = std::string(architecture_name(c.architecture)) +
                            " vocab=" + std::to_string(c.vocab_size) +
                            " hidden=" + std::to_string(c.hidden_size) +
                            " layers=" + std::to_string(c.num_hidden_layers) +
                            " intermediate=" + std::to_string(c.intermediate_size);
  return {
      {"format", kFormat},
      {"model", model},
      {"optimizer", optimizer_name(o.optimizer.kind)},
      {"lora_rank", std::to_string(o.lora.rank)},
      {"lora_alpha", o.lora.enabled() ? number(o.lora.alpha) : "-"},
      {"lora_targets", o.lora.enabled() ? targets : "-"},
      {"seq", std::to_string(o.sequence)},
      // The data's micro-batch: every rank's together.
      {"batch", std::to_string(o.batch * (o.communicator ? o.communicator->size() : 1))},
      {"accumulate", std::to_string(o.optimizer.accumulate)},
      {"dtype", dtype_name(o.dtype)},
      {"seed", std::to_string(o.seed)},
      {"data", data_digest(data)},
  };
}

namespace {

// A count written by std::to_string: decimal digits only, within int64.
int64_t meta_count(const fs::path& file, const std::map<std::string, std::string>& meta,
                   const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end())
    throw FormatError(file.string() + ": checkpoint metadata lacks '" + key + "'");
  const std::string& text = it->second;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || text[0] == '-' || ec != std::errc() || end != text.data() + text.size()) {
    throw FormatError(file.string() + ": checkpoint metadata '" + key + "' is not a count: '" +
                      text + "'");
  }
  return v;
}

}  // namespace

CheckpointPosition checkpoint_position(const fs::path& file,
                                       const std::map<std::string, std::string>& saved,
                                       int64_t examples) {
  CheckpointPosition p;
  p.global_step = meta_count(file, saved, "global_step");
  p.next = {meta_count(file, saved, "next_epoch"), meta_count(file, saved, "next_index")};
  if (p.next.index >= examples) {
    throw FormatError(file.string() + ": checkpoint data position (example " +
                      std::to_string(p.next.index) + ") is past the data's end (" +
                      std::to_string(examples) + " examples)");
  }
  return p;
}

void check_resume_fields(const fs::path& file, const std::map<std::string, std::string>& saved,
                         const std::vector<std::pair<std::string, std::string>>& now) {
  auto format = saved.find("format");
  if (format == saved.end() || format->second != kFormat) {
    throw FormatError(file.string() + ": not a meganeura fine-tuning checkpoint (format " +
                      (format == saved.end() ? std::string("absent") : "'" + format->second + "'") +
                      ", expected '" + kFormat + "')");
  }
  for (const auto& [key, value] : now) {
    auto it = saved.find(key);
    if (it == saved.end())
      throw FormatError(file.string() + ": checkpoint metadata lacks '" + key + "'");
    if (it->second != value) {
      throw Error(file.string() + ": cannot resume: '" + key + "' is '" + it->second +
                  "' in the checkpoint but '" + value + "' in this run");
    }
  }
}

}  // namespace mn::finetune
