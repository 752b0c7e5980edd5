#pragma once
// A sequence of dispatches and copies recorded once into a command buffer and submitted as
// often as needed (one training step = one submission).
//
// Barriers: each operation declares the byte ranges it reads and writes (dispatches through
// their bindings' Access, copies and fills by construction). A barrier is recorded before an
// operation only if it reads what an operation since the last barrier wrote, or writes what
// one read or wrote. Every submission also starts with one barrier (ordering it after the
// previous submission's writes) and ends with one that makes its writes visible to the host.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <type_traits>
#include <vector>

#include <vulkan/vulkan.h>

#include "vulkan/arena.h"
#include "vulkan/hazards.h"

namespace mn::vk {

class Device;
class Pipeline;

enum class Access : uint8_t { read = 1, write = 2, read_write = 3 };

struct BufferBinding {
  Range range;  // must satisfy the arena's placement rule
  Access access = Access::read_write;
};

struct Dispatch {
  const Pipeline* pipeline = nullptr;
  std::vector<BufferBinding> buffers;  // binding i of the kernel's interface
  std::vector<std::byte> push_constants;
  std::array<uint32_t, 3> groups{1, 1, 1};
  std::string label;  // names the dispatch in timings and errors; default: the kernel's name

  template <class T>
  void set_push_constants(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    push_constants.resize(sizeof(T));
    std::memcpy(push_constants.data(), &value, sizeof(T));
  }
};

struct RecordingOptions {
  // A GPU timestamp after every operation: timings() and total_ms(). A profile: the
  // timestamps themselves may cost a little time.
  bool timestamps = false;
  std::string label = "recording";
  // Timestamps only at the two ends of each submission: total_ms() alone.
  bool total_time = false;
  // wait() polls the fence this long before blocking on it, longer for a recording whose runs
  // take a little longer (vulkan/fence_spin.h): a short submission (a decoding step, a prompt)
  // is then seen complete at once, where a blocking wait adds the thread's wake-up.
  uint32_t spin_wait_us = 2000;
};

struct OpTiming {
  std::string label;
  double ms = 0;  // from the end of the previous operation to the end of this one
  std::string statistics;  // a dispatch's Pipeline::statistics_line()
};

class Recording {
 public:
  explicit Recording(Device& device, RecordingOptions options = {});
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  // Operations, in submission order. Arenas, buffers and pipelines must outlive the recording.
  // Bad arguments (wrong binding count, out-of-range bytes, ...) throw mn::Error.
  void dispatch(Dispatch dispatch);
  void upload(const Buffer& source, uint64_t source_offset, const Range& destination);
  void download(const Range& source, const Buffer& destination, uint64_t destination_offset);
  void copy(const Range& source, const Range& destination);
  void fill(const Range& destination, uint32_t value);  // offset and size multiples of 4

  // Records the command buffer; no operation may be added afterwards. submit() calls it.
  void finish();
  // Starts the work and returns at once. A still-running earlier submission of this recording
  // is waited for first.
  void submit();
  bool poll();  // true once the last submission has completed
  // Waits for the last submission. mn::DeviceError on device loss or validation messages.
  void wait();
  // wait() on another thread; leave the recording alone until the future is ready.
  std::future<void> wait_async();
  void run() {
    submit();
    wait();
  }

  size_t operation_count() const { return ops_.size(); }
  size_t dispatch_count() const { return dispatch_count_; }
  // Barriers between operations (not counting the one at each end); valid after finish().
  size_t barrier_count() const { return barrier_count_; }
  bool finished() const { return finished_; }
  // GPU times of the last completed submission: per operation (timestamps) and in total
  // (timestamps or total_time; 0 without either).
  const std::vector<OpTiming>& timings() const { return timings_; }
  double total_ms() const { return total_ms_; }

 private:
  struct Copy {
    VkBuffer source = VK_NULL_HANDLE, destination = VK_NULL_HANDLE;
    VkBufferCopy region{};
  };
  struct Fill {
    VkBuffer buffer = VK_NULL_HANDLE;
    uint64_t offset = 0, size = 0;
    uint32_t value = 0;
  };
  struct Op {
    enum class Kind { dispatch, copy, fill } kind = Kind::dispatch;
    std::string label;
    std::vector<MemoryAccess> accesses;
    Dispatch dispatch;
    std::vector<Copy> copies;
    std::vector<Fill> fills;
  };

  void add(Op op);
  void record_dispatch(VkCommandBuffer cmd, const Op& op, VkDescriptorSet set);
  void complete();  // after the fence signalled: timings, validation

  Device& device_;
  RecordingOptions options_;
  std::vector<Op> ops_;
  size_t dispatch_count_ = 0;
  size_t barrier_count_ = 0;
  bool finished_ = false;
  bool pending_ = false;
  // Taken from the device (Device::acquire_command_slot), given back reset when destroyed.
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkDescriptorPool descriptor_pool_ = VK_NULL_HANDLE;
  VkQueryPool query_pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  // When the pending submission started, and how long the last one waited for took from its
  // submission until its fence was seen signalled (wait()'s polling budget).
  std::chrono::steady_clock::time_point submitted_at_{};
  std::chrono::microseconds last_run_{0};
  std::vector<OpTiming> timings_;
  double total_ms_ = 0;
};

}  // namespace mn::vk
