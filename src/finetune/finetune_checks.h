#pragma once
// Checks of the fine-tuning options made before anything is loaded or trained, and the
// checkpoint's record of the options that must match on resume.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <meganeura/finetune.h>

namespace mn::finetune {

// Throws mn::Error naming the option whose value is out of range, and for an output path
// (--save, --checkpoint) that cannot be written.
void check_options(const FinetuneOptions& o);

// The fields a checkpoint must agree on with the run that resumes it, checked in this order.
std::vector<std::pair<std::string, std::string>> resume_fields(const FinetuneOptions& o,
                                                               const LmConfig& config,
                                                               const LmExamples& data);
// Throws mn::Error naming the first field whose value differs (checkpoint vs now).
void check_resume_fields(const std::filesystem::path& file,
                         const std::map<std::string, std::string>& saved,
                         const std::vector<std::pair<std::string, std::string>>& now);

// Where a checkpoint stopped, from its metadata: the updates done and the next example.
struct CheckpointPosition {
  int64_t global_step = 0;
  ExamplePosition next;
};
// FormatError naming the file and the field unless global_step, next_epoch and next_index are
// counts (decimal digits) and next_index lies inside the data's `examples`.
CheckpointPosition checkpoint_position(const std::filesystem::path& file,
                                       const std::map<std::string, std::string>& saved,
                                       int64_t examples);

}  // namespace mn::finetune
