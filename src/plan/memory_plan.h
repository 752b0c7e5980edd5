#pragma once
// Liveness-based placement of tensors in one arena: tensors whose lifetimes (in dispatch order)
// do not overlap may share bytes; persistent tensors (parameters, optimizer state, inputs,
// requested outputs) live for the whole step and never share.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mn::plan {

struct BufferRequest {
  size_t bytes = 0;
  int first_use = 0;  // index of the dispatch that writes it (or -1 before the first)
  int last_use = 0;   // index of the last dispatch that reads it
  bool persistent = false;
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request, aligned
  size_t arena_bytes = 0;       // total arena size
  size_t persistent_bytes = 0;  // of which persistent
  size_t naive_bytes = 0;       // what one buffer per tensor would take
};

// Greedy best fit among lifetime-conflicting placements, with the transients taken largest
// first, longest-lived first, and largest in size times lifetime first; the smallest arena wins.
// With chunk_bytes (a power of two, 0: none), no buffer straddles a multiple of chunk_bytes, so
// each one can be bound with one descriptor of an arena made of chunk_bytes-sized buffers; a
// buffer larger than a chunk is an error.
MemoryPlan plan_memory(std::span<const BufferRequest> requests, size_t alignment,
                       size_t chunk_bytes = 0);

// True when two requests are alive at the same dispatch.
bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b);

}  // namespace mn::plan
