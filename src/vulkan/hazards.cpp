#include "vulkan/hazards.h"

#include <algorithm>

namespace mn::vk {
namespace {

bool overlaps(const MemoryAccess& a, const MemoryAccess& b) {
  return a.resource == b.resource && a.begin < b.end && b.begin < a.end;
}

bool any_overlap(const std::vector<MemoryAccess>& set, const MemoryAccess& a) {
  return std::any_of(set.begin(), set.end(), [&](const MemoryAccess& b) { return overlaps(a, b); });
}

}  // namespace

bool accesses_conflict(std::span<const MemoryAccess> a, std::span<const MemoryAccess> b) {
  for (const MemoryAccess& x : a) {
    if (x.begin >= x.end) continue;
    for (const MemoryAccess& y : b) {
      if ((x.write || y.write) && y.begin < y.end && overlaps(x, y)) return true;
    }
  }
  return false;
}

bool HazardTracker::conflicts(std::span<const MemoryAccess> accesses) const {
  for (const MemoryAccess& a : accesses) {
    if (a.begin >= a.end) continue;
    if (any_overlap(writes_, a)) return true;            // read or write after write
    if (a.write && any_overlap(reads_, a)) return true;  // write after read
  }
  return false;
}

void HazardTracker::add(std::span<const MemoryAccess> accesses) {
  for (const MemoryAccess& a : accesses) {
    if (a.begin >= a.end) continue;
    (a.write ? writes_ : reads_).push_back(a);
  }
}

void HazardTracker::clear() {
  reads_.clear();
  writes_.clear();
}

Ordering order_operations(std::span<const OrderedOperation> ops) {
  const size_t n = ops.size();
  Ordering o;
  o.barrier_before.assign(n, 0);
  o.waits.assign(n, {});
  // implied[i]: the flow launches of the window that flow launch i is known to follow (bits by
  // operation index), itself included.
  std::vector<std::vector<uint64_t>> implied(n);
  const size_t words = (n + 63) / 64;
  auto has = [](const std::vector<uint64_t>& bits, size_t j) {
    return !bits.empty() && ((bits[j / 64] >> (j % 64)) & 1u);
  };
  std::vector<size_t> window;  // operations since the last barrier
  for (size_t i = 0; i < n; ++i) {
    std::vector<size_t> conflicts;  // latest first
    bool other = false;
    for (size_t w = window.size(); w-- > 0;) {
      const size_t j = window[w];
      if (!accesses_conflict(ops[i].accesses, ops[j].accesses)) continue;
      conflicts.push_back(j);
      other = other || !ops[j].flow;
    }
    if (!conflicts.empty() && (!ops[i].flow || other)) {
      o.barrier_before[i] = 1;
      for (size_t j : window) implied[j].clear();
      window.clear();
      conflicts.clear();
    }
    if (ops[i].flow) {
      std::vector<uint64_t> bits(words, 0);
      for (size_t j : conflicts) {
        if (has(bits, j)) continue;
        o.waits[i].push_back(static_cast<uint32_t>(j));
        for (size_t k = 0; k < words; ++k) bits[k] |= implied[j][k];
      }
      bits[i / 64] |= uint64_t{1} << (i % 64);
      implied[i] = std::move(bits);
    }
    window.push_back(i);
  }
  return o;
}

}  // namespace mn::vk
