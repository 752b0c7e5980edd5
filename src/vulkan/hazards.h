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

// Whether a and b touch common bytes of one resource with at least one of them writing.
bool accesses_conflict(std::span<const MemoryAccess> a, std::span<const MemoryAccess> b);

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

// Where a sequence of operations needs barriers when some of them are flow launches
// (codegen/flow_kernel.h), which wait for the launches they depend on themselves.
struct OrderedOperation {
  std::span<const MemoryAccess> accesses;
  bool flow = false;  // a flow launch (its counter tells when it is done)
};
struct Ordering {
  std::vector<char> barrier_before;  // per operation
  // Per operation, the earlier flow launches it waits for (none for other operations): each it
  // conflicts with since the last barrier, less those another wait already implies (a flow
  // launch finishes only after what it waited for).
  std::vector<std::vector<uint32_t>> waits;
};
// A barrier goes before an operation that conflicts with one since the last barrier, unless the
// operation is a flow launch and every such one is a flow launch too: then it waits for them.
Ordering order_operations(std::span<const OrderedOperation> ops);

}  // namespace mn::vk
