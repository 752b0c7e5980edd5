#pragma once
// Which ops the GPU backend can lower to a kernel archetype.
#include <string_view>

namespace mn::schedule {

bool has_gpu_lowering(std::string_view op);

}  // namespace mn::schedule
