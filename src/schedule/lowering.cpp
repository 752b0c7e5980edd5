#include "schedule/lowering.h"

namespace mn::schedule {

// No kernel archetype is generated yet: every op runs on the CPU reference only.
bool has_gpu_lowering(std::string_view) { return false; }

}  // namespace mn::schedule
