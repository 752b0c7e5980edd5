#pragma once
// A module's tensors from a checkpoint that holds more than the module, under a key prefix:
// Whisper's encoder inside WhisperModel ("model.encoder."), SmolVLA's action expert inside a
// SmolVLAPolicy ("model.").
#include <filesystem>
#include <string>

#include <meganeura/nn.h>

namespace mn::cli {

// Each of the module's keys as "<prefix><key>", or bare where the file has no prefixed one;
// FormatError naming the file and both names when neither is there.
nn::StateDict module_weights(const nn::Module& module, const std::filesystem::path& file,
                             const std::string& prefix);

}  // namespace mn::cli
