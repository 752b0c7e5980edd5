#include "plan/memory_plan.h"

#include <algorithm>
#include <numeric>

#include <meganeura/error.h>

namespace mn::plan {

namespace {
size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  if (a.persistent || b.persistent) return true;
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

MemoryPlan plan_memory(std::span<const BufferRequest> requests, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error("plan_memory: alignment must be a power of two");
  }
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  size_t cursor = 0;
  // Persistent tensors first, packed back to back.
  for (size_t i = 0; i < requests.size(); ++i) {
    plan.naive_bytes += align_up(requests[i].bytes, alignment);
    if (!requests[i].persistent) continue;
    plan.offsets[i] = cursor;
    cursor += align_up(std::max<size_t>(requests[i].bytes, 1), alignment);
  }
  plan.persistent_bytes = cursor;

  std::vector<size_t> order;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].persistent) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  struct Placed {
    size_t offset, end, index;
  };
  std::vector<Placed> placed;  // transient placements, kept sorted by offset
  size_t top = cursor;
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t i : order) {
    const BufferRequest& r = requests[i];
    const size_t size = align_up(std::max<size_t>(r.bytes, 1), alignment);
    busy.clear();
    for (const Placed& p : placed) {
      if (lifetimes_overlap(r, requests[p.index])) busy.emplace_back(p.offset, p.end);
    }
    // Best fit: the smallest gap between conflicting placements that holds `size`.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, pos = cursor;
    for (const auto& [begin, end] : busy) {  // busy is sorted by offset (placed is)
      if (begin > pos && begin - pos >= size && begin - pos < best_gap) {
        best = pos;
        best_gap = begin - pos;
      }
      pos = std::max(pos, end);
    }
    if (best == SIZE_MAX) best = pos;
    plan.offsets[i] = best;
    Placed p{best, best + size, i};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), p,
                                   [](const Placed& a, const Placed& b) { return a.offset < b.offset; }),
                  p);
    top = std::max(top, best + size);
  }
  plan.arena_bytes = std::max(top, alignment);
  return plan;
}

}  // namespace mn::plan
