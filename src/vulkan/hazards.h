#pragma once
// Decides where a recorded sequence needs barriers: an operation waits for earlier ones only
// when it reads what one of them wrote, or writes what one of them read or wrote, since the
// last barrier. Pure bookkeeping over byte ranges, testable without a GPU.
#include <cstdint>
#include <span>
#include <vector>

namespace mn::vk {

struct MemoryAccess {
  uint64_t resource = 0;        // Arena::id() or Buffer::id()
  uint64_t begin = 0, end = 0;  // bytes [begin, end)
  bool write = false;
};

class HazardTracker {
 public:
  // True if an operation with these accesses conflicts with one since the last barrier.
  bool conflicts(std::span<const MemoryAccess> accesses) const;
  void add(std::span<const MemoryAccess> accesses);
  // A barrier orders everything before it against everything after it.
  void clear();

 private:
  std::vector<MemoryAccess> reads_, writes_;
};

}  // namespace mn::vk
