#include "plan/memory_plan.h"

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>

#include <meganeura/error.h>

namespace mn::plan {

namespace {

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Places the transient requests in `order`, each at the best fit among the placements whose
// lifetimes overlap its own (the smallest gap that holds it, else the top), never below `base`;
// `fit` moves an offset past a chunk boundary the buffer would straddle. `top`: the arena's end.
void place_transients(std::span<const BufferRequest> requests, const std::vector<size_t>& order,
                      size_t alignment, const std::function<size_t(size_t, size_t)>& fit,
                      size_t base, std::vector<size_t>& offsets, size_t& top) {
  struct Placed {
    size_t offset, end, index;
  };
  std::vector<Placed> placed;  // kept sorted by offset
  std::vector<std::pair<size_t, size_t>> busy;
  for (size_t i : order) {
    const BufferRequest& r = requests[i];
    const size_t size = align_up(std::max<size_t>(r.bytes, 1), alignment);
    busy.clear();
    for (const Placed& p : placed) {
      if (lifetimes_overlap(r, requests[p.index])) busy.emplace_back(p.offset, p.end);
    }
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, pos = base;
    for (const auto& [begin, end] : busy) {  // busy is sorted by offset (placed is)
      const size_t start = fit(pos, size);
      if (begin > start && begin - start >= size && begin - pos < best_gap) {
        best = start;
        best_gap = begin - pos;
      }
      pos = std::max(pos, end);
    }
    if (best == SIZE_MAX) best = fit(pos, size);
    offsets[i] = best;
    Placed p{best, best + size, i};
    placed.insert(
        std::upper_bound(placed.begin(), placed.end(), p,
                         [](const Placed& a, const Placed& b) { return a.offset < b.offset; }),
        p);
    top = std::max(top, best + size);
  }
}

}  // namespace

bool lifetimes_overlap(const BufferRequest& a, const BufferRequest& b) {
  if (a.persistent || b.persistent) return true;
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

MemoryPlan plan_memory(std::span<const BufferRequest> requests, size_t alignment,
                       size_t chunk_bytes) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error("plan_memory: alignment must be a power of two");
  }
  if (chunk_bytes != 0 && ((chunk_bytes & (chunk_bytes - 1)) != 0 || chunk_bytes < alignment)) {
    throw Error("plan_memory: chunk size must be a power of two no smaller than the alignment");
  }
  // The first offset >= pos where `size` bytes fit without crossing a chunk boundary.
  const std::function<size_t(size_t, size_t)> fit = [&](size_t pos, size_t size) {
    if (chunk_bytes == 0 || pos / chunk_bytes == (pos + size - 1) / chunk_bytes) return pos;
    return align_up(pos, chunk_bytes);
  };
  for (const BufferRequest& r : requests) {
    if (chunk_bytes != 0 && r.bytes > chunk_bytes) {
      throw Error("a tensor of " + std::to_string(r.bytes) +
                  " bytes exceeds the device's largest storage-buffer binding (" +
                  std::to_string(chunk_bytes) + " bytes)");
    }
  }
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  size_t cursor = 0;
  // Persistent tensors first, packed back to back.
  for (size_t i = 0; i < requests.size(); ++i) {
    plan.naive_bytes += align_up(requests[i].bytes, alignment);
    if (!requests[i].persistent) continue;
    const size_t size = align_up(std::max<size_t>(requests[i].bytes, 1), alignment);
    cursor = fit(cursor, size);
    plan.offsets[i] = cursor;
    cursor += size;
  }
  plan.persistent_bytes = cursor;

  // Transients by best fit, in three orders of request; the smallest arena is kept (the first
  // on ties). Largest first packs most steps best; longest-lived first, or largest in size times
  // lifetime, packs steps whose large buffers live briefly (ResNet-50's training step: 2843, 2820
  // and 2792 MiB with the H200's 2 GiB chunks).
  std::vector<size_t> transients;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].persistent) transients.push_back(i);
  }
  auto lifetime = [&](size_t i) {
    return static_cast<double>(requests[i].last_use - requests[i].first_use + 1);
  };
  const std::array<std::function<double(size_t)>, 3> keys{
      [&](size_t i) { return static_cast<double>(requests[i].bytes); },
      [&](size_t i) { return lifetime(i); },
      [&](size_t i) { return static_cast<double>(requests[i].bytes) * lifetime(i); }};
  std::vector<size_t> offsets;
  size_t best_top = SIZE_MAX;
  for (const auto& key : keys) {
    std::vector<size_t> order = transients;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return key(a) > key(b); });
    size_t top = cursor;
    std::vector<size_t> candidate = plan.offsets;
    place_transients(requests, order, alignment, fit, cursor, candidate, top);
    if (top < best_top) {
      best_top = top;
      offsets = std::move(candidate);
    }
  }
  plan.offsets = std::move(offsets);
  const size_t top = best_top;
  plan.arena_bytes = std::max(top, alignment);
  return plan;
}

}  // namespace mn::plan
