#include "module_weights.h"

#include <meganeura/data.h>
#include <meganeura/error.h>

namespace mn::cli {

nn::StateDict module_weights(const nn::Module& module, const std::filesystem::path& file,
                             const std::string& prefix) {
  const SafetensorsReader r(file);
  nn::StateDict out;
  for (const nn::StateEntry& e : module.state_entries()) {
    const std::string prefixed = prefix + e.key;
    if (r.contains(prefixed)) {
      out[e.key] = r.array(prefixed);
    } else if (r.contains(e.key)) {
      out[e.key] = r.array(e.key);
    } else {
      throw FormatError(file.string() + ": no tensor '" + prefixed + "' (nor '" + e.key + "')");
    }
  }
  return out;
}

}  // namespace mn::cli
