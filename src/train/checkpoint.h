#pragma once
// Training checkpoints: every parameter and optimizer state of the step session in a
// safetensors file, with metadata naming the run (format, model, optimizer, batch) and its
// position (global step, next epoch and batch). Resuming checks every field against the run
// being resumed and names the first one that disagrees.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include <meganeura/data.h>
#include <meganeura/session.h>
#include <meganeura/train.h>

namespace mn::train {

// Format 2: fully connected weights [out, in] as PyTorch (nn::Linear). Format 1, read too, had
// them [in, out]; its weights and their optimizer state are transposed on loading.
inline constexpr const char* kCheckpointFormat = "meganeura-checkpoint-2";
inline constexpr const char* kCheckpointFormatInOut = "meganeura-checkpoint-1";

void save_checkpoint(const std::filesystem::path& path, Session& s, const TrainOptions& o,
                     int64_t global_step, DataLoader::Position next);

struct ResumePoint {
  int64_t global_step = 0;
  DataLoader::Position next;
};

// Loads the checkpoint o.resume into `s` after checking it belongs to this run: a run of
// `total` steps, `per_epoch` batches per epoch. mn::Error (FormatError for a malformed file)
// naming the field, the expected and the found value.
ResumePoint load_checkpoint(Session& s, const TrainOptions& o, int64_t per_epoch, int64_t total);

// The checks of load_checkpoint on the metadata alone (format, model, optimizer, batch, a data
// position that is step `global_step` of `per_epoch` batches per epoch and before `total`):
// the position to resume from, or the same errors.
ResumePoint resume_point(const std::map<std::string, std::string>& meta, const TrainOptions& o,
                         int64_t per_epoch, int64_t total);

// Throws an mn::Error naming the first parameter or optimizer state holding NaN or Inf.
void check_finite(Session& s, int64_t global_step);

}  // namespace mn::train
