#pragma once
// Flow launches (DeviceTraits::flow_launches, MN_FLOW=1): a program whose kernels order
// themselves through counters instead of barriers (codegen/flow_kernel.h). Each launch's kernel
// is replaced by its flow form, the buffers the program writes declared coherent; the recording
// then computes what each launch waits for (vulkan/recording.h) and places barriers only around
// copies. For programs that do not train: a decoding step's short, dependent windows are what
// barriers cost most in. Cache prefetches are left out of such programs (nothing orders a
// prefetch after the window it should follow).
#include <vector>

#include "plan/step_plan.h"

namespace mn::plan {

// Replaces the kernels of `launches` by their flow forms (KernelLaunch::flow); returns how many
// were replaced (a kernel whose text has no single main() keeps its barriers).
int make_flow_launches(std::vector<PlannedLaunch>& launches,
                       const std::vector<PlannedBuffer>& buffers);

}  // namespace mn::plan
