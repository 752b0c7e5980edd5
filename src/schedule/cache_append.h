#pragma once
// A decoding step writes each layer's new key and value into the caches, then attends over
// the caches: the attention waits for the writes, one barrier a layer. Where every row of the
// caches gets one new slot, the attention can read the caches as they were and take that slot
// from the writes' updates (as the writes store it: rotated, rounded to the cache's dtype).
// It then no longer depends on the writes, which run after it, beside the next kernel, in
// place: the old caches' only other reader, the attention, is ordered before them.
#include <vector>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// Gives every single cached_attention group whose keys and values come straight from single
// cache_write groups (one update slot per cache row, the same positions, a rope only where the
// lowering applies the attention's own) the CacheAppend that reads past them.
void read_past_cache_writes(const Graph& g, std::vector<KernelGroup>& groups,
                            const codegen::DeviceTraits& device);

}  // namespace mn::schedule
