#pragma once
// A rotary embedding read by one kernel only is applied by that kernel as it loads its operand:
// a cache_write stores rotated keys, a cached attention reads its query rotated
// (codegen/rope_load.h). A decoding layer then has no rope launches and one barrier fewer
// (the rotated keys were written to the cache by a kernel that waited for the rope).
#include <vector>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// Gives every single cache_write (update) and cached_attention (query) group whose operand is
// a rope_positions computed by a single group, read by nothing else, the rotation
// (KernelGroup::rope), and drops the rope's group.
void fuse_rope_loads(const Graph& g, std::vector<KernelGroup>& groups,
                     const codegen::DeviceTraits& device);

}  // namespace mn::schedule
