#pragma once
// Cache prefetches: a kernel at the end of each barrier window that reads the weights the next
// window's kernels will read, so that they come from the GPU's cache instead of its memory.
//
// A decoding step is a chain of short windows (a layer's q/k/v projection, its attention, its
// output, gate·up and down projections), each a few microseconds of which one memory latency is
// its kernels waiting for their weights: every token reads the whole model again, far more than
// the cache holds, so each window finds its weights in memory. The window before runs anyway
// (it cannot start the next one's kernels, which read what it writes), and its multiprocessors
// have room: a kernel beside it that reads the next window's weights, and keeps nothing, makes
// them cache hits when the barrier lets that window start.
//
// Only buffers no kernel of the program writes are read (parameters, constants, inputs: never
// a value being computed, so the prefetch adds no hazard and no barrier; a KV cache, which the
// step writes, was measured to gain 0.3% more and is left out), each of at least
// min_buffer_bytes, none the window before reads itself, and no more than max_window_bytes for
// a window (an LM head reading the whole embedding is left alone: its prefetch would outlast
// the window before). Every prefetch writes the plan's sink buffer (an unread word), which only
// prefetches touch, one a window.
#include <cstdint>
#include <vector>

#include "plan/step_plan.h"

namespace mn::plan {

struct CachePrefetchOptions {
  uint64_t min_buffer_bytes = uint64_t{64} << 10;
  uint64_t max_window_bytes = uint64_t{16} << 20;
  uint32_t max_bindings = 16;  // the sink's included
};

// A prefetch to launch after launch `after` (the last of its window): it reads `buffers`.
struct CachePrefetch {
  int after = 0;
  std::vector<int> buffers;
};

// The prefetches of `launches` in dispatch order (none for the first window). `written`
// marks buffers something other than a launch writes too (the assignments' copies).
std::vector<CachePrefetch> plan_cache_prefetches(const std::vector<PlannedLaunch>& launches,
                                                 const std::vector<PlannedBuffer>& buffers,
                                                 const std::vector<char>& written,
                                                 const CachePrefetchOptions& options = {});

// Inserts a launch of codegen::cache_prefetch_kernel after each prefetch's `after`, binding
// `sink` last. Returns every earlier launch's new index (by old index).
std::vector<int> insert_cache_prefetches(std::vector<PlannedLaunch>& launches,
                                         const std::vector<PlannedBuffer>& buffers,
                                         const std::vector<CachePrefetch>& prefetches, int sink,
                                         const codegen::DeviceTraits& device);

}  // namespace mn::plan
