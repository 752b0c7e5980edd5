#pragma once
// The host side of the device-side index checks (codegen/index_check.h): every node whose
// kernels read indices has a 16-byte slot in the plan's index region (plan::IndexRegion), zero
// until a kernel meets an out-of-range index. After each step the region is read at once, from
// the copy the step downloads into host-cached memory (never through a host mapping of the
// arena: those reads are uncached), and the first node in dispatch order holding a bad index
// raises mn::IndexError naming the node, the element, the value and the valid range. One small
// read per step is what keeps the check on by default.
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel.h"
#include "plan/step_plan.h"
#include "vulkan/arena.h"
#include "vulkan/buffer.h"
#include "vulkan/recording.h"

namespace mn::runtime {

// Whether sessions check indices by default: yes, unless $MN_CHECK_INDICES=0.
bool check_indices_from_env();

// "index 7 at element 3 of the indices (input 'idx') is out of range [0, 5) along axis 0 of
// shape [5, 3]", with `source` (where the indices come from) when given.
std::string describe_bad_index(const codegen::IndexCheck& check, uint32_t element, int32_t value,
                               const std::string& source = {});

// The slots of one program's plan.
class IndexSlots {
 public:
  // Zeroes the slots of `plan` in `arena`; staging for their copy.
  IndexSlots(vk::Device& device, vk::Arena& arena, const plan::StepPlan& plan);

  // The copy of the region into host memory at the end of the step.
  void record_downloads(vk::Recording& recording, const plan::StepPlan& plan) const;

  // After the step completed: mn::IndexError for the first slot holding a bad index, the
  // slots zeroed first so that the next step starts clean.
  void check(const plan::StepPlan& plan, const std::string& program);

 private:
  vk::Arena& arena_;
  uint64_t bytes_ = 0;  // of the region
  std::unique_ptr<vk::StagingBuffer> staging_;
};

}  // namespace mn::runtime
