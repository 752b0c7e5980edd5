#pragma once
// Flow launches (DeviceTraits::flow_launches, MN_FLOW=1): a program whose kernels order
// themselves through counters instead of barriers (codegen/flow_kernel.h). Each launch's kernel
// is replaced by its flow form, the buffers the program writes declared coherent; the recording
// then computes what each launch waits for (vulkan/recording.h) and places barriers only around
// copies. For programs that do not train: a decoding step's short, dependent windows are what
// barriers cost most in. Cache prefetch launches are left out of such programs (nothing would
// order one after the window it should follow): each kernel other than the tensor-core ones
// reads its own weights ahead while it waits.
#include <cstdint>
#include <vector>

#include "plan/step_plan.h"

namespace mn::plan {

// A buffer a flow kernel only reads is read ahead while it waits (codegen::FlowOptions::prefetch)
// from this size, as cache prefetches choose theirs (plan/cache_prefetch.h).
inline constexpr uint64_t kFlowPrefetchMinBytes = 64 * 1024;

// Replaces the kernels of `launches` by their flow forms (KernelLaunch::flow); returns how many
// were replaced (a kernel whose text has no single main() keeps its barriers).
int make_flow_launches(std::vector<PlannedLaunch>& launches,
                       const std::vector<PlannedBuffer>& buffers);

}  // namespace mn::plan
