#pragma once
// Training checkpoints: every parameter and optimizer state of the step session in a
// safetensors file, with metadata naming the run (format, optimizer, batch and whatever else
// the trainer says identifies it) and its position (global step, next epoch and batch).
// Resuming checks every field against the run being resumed and names the first one that
// disagrees.
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <meganeura/data.h>
#include <meganeura/session.h>

namespace mn::train {

using Meta = std::map<std::string, std::string>;

// Format 2: fully connected weights [out, in] as PyTorch (nn::Linear). Format 1, read too, had
// them [in, out]; its weights and their optimizer state are transposed on loading.
inline constexpr const char* kCheckpointFormat = "meganeura-checkpoint-2";
inline constexpr const char* kCheckpointFormatInOut = "meganeura-checkpoint-1";

// What a checkpoint is checked against when resuming.
struct RunShape {
  std::filesystem::path resume;  // the checkpoint, for messages
  Meta identity;                 // fields that must be equal ("optimizer", "batch", "model"...)
  int64_t per_epoch = 0;         // batches per epoch
  int64_t total = 0;             // steps in the run
  int64_t epochs = 0;
  // Tensors of the session that checkpoints leave out (a data-parallel step's gradient sums
  // where they are zero at every checkpoint).
  std::set<std::string> transient;
};

// Writes the session's parameters and states with `identity`, the position, and `extra`
// (anything else the trainer keeps, e.g. partial epoch sums), atomically. A session holding a
// NaN or Inf is never saved: check_finite's error instead.
// `transient` tensors are left out.
void save_checkpoint(const std::filesystem::path& path, Session& s, const Meta& identity,
                     int64_t global_step, DataLoader::Position next, const Meta& extra = {},
                     const std::set<std::string>& transient = {});

struct ResumePoint {
  int64_t global_step = 0;
  DataLoader::Position next;
  Meta meta;  // all of the checkpoint's metadata
};

// Loads run.resume into `s` after checking it belongs to `run`. mn::Error (FormatError for a
// malformed file) naming the field, the expected and the found value.
ResumePoint load_checkpoint(Session& s, const RunShape& run);

// The checks of load_checkpoint on the metadata alone (format, identity, a data position that
// is step `global_step` of `per_epoch` batches per epoch and before `total`).
ResumePoint resume_point(const Meta& meta, const RunShape& run);

// Throws an mn::Error naming the first parameter or optimizer state holding NaN or Inf.
void check_finite(Session& s, int64_t global_step);

}  // namespace mn::train
