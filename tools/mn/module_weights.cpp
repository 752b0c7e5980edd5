#include "module_weights.h"

#include <meganeura/error.h>

namespace mn::cli {

std::optional<std::string> checkpoint_name(const SafetensorsReader& file, const std::string& prefix,
                                           const std::string& key) {
  for (const std::string& name : {prefix + key, key}) {
    if (file.contains(name)) return name;
  }
  return std::nullopt;
}

nn::StateDict module_weights(const nn::Module& module, const std::filesystem::path& file,
                             const std::string& prefix) {
  const SafetensorsReader r(file);
  nn::StateDict out;
  for (const nn::StateEntry& e : module.state_entries()) {
    const std::optional<std::string> name = checkpoint_name(r, prefix, e.key);
    if (!name) {
      throw FormatError(file.string() + ": no tensor '" + prefix + e.key + "' (nor '" + e.key +
                        "')");
    }
    out[e.key] = r.array(*name);
  }
  return out;
}

}  // namespace mn::cli
