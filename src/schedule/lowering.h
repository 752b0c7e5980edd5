#pragma once
// Which ops the GPU backend can run: directly through a kernel lowering, or as the
// decomposition of a composite.
#include <string_view>

namespace mn::schedule {

bool has_gpu_lowering(std::string_view op);

}  // namespace mn::schedule
