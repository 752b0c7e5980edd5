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

}  // namespace mn::vk
