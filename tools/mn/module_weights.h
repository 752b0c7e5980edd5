#pragma once
// A module's tensors from a checkpoint that holds more than the module, under a key prefix:
// Whisper's encoder inside WhisperModel ("model.encoder."), SmolVLA's action expert inside a
// SmolVLAPolicy ("model.").
#include <filesystem>
#include <optional>
#include <string>

#include <meganeura/data.h>
#include <meganeura/nn.h>

namespace mn::cli {

// The name `key` has in the file: "<prefix><key>" where it is there, else "<key>" where that is;
// nullopt for neither.
std::optional<std::string> checkpoint_name(const SafetensorsReader& file, const std::string& prefix,
                                           const std::string& key);

// Each of the module's keys as "<prefix><key>", or bare where the file has no prefixed one;
// FormatError naming the file and both names when neither is there.
nn::StateDict module_weights(const nn::Module& module, const std::filesystem::path& file,
                             const std::string& prefix);

}  // namespace mn::cli
