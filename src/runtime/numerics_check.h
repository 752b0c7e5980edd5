#pragma once
// Debugging NaN/Inf: every floating-point value a kernel writes is copied to host memory right
// after the kernel (before a later kernel may reuse its bytes), and after the step the copies
// are scanned in dispatch order, so the error names the first graph node that produced a
// non-finite value. A debug mode: it costs a copy of every intermediate per step.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/step_plan.h"
#include "vulkan/buffer.h"

namespace mn::runtime {

struct NumericsProbe {
  size_t launch = 0;  // the launch that wrote it
  int buffer = -1;    // index into StepPlan::buffers
  uint64_t staging_offset = 0;
};

struct NumericsCheck {
  std::unique_ptr<vk::StagingBuffer> staging;
  std::vector<NumericsProbe> probes;  // in dispatch order
};

// Whether sessions check numerics by default: $MN_CHECK_NUMERICS=1.
bool check_numerics_from_env();

// A probe for every floating-point buffer each launch writes, and the host buffer they fill.
NumericsCheck plan_numerics_check(vk::Device& device, const plan::StepPlan& plan);

// Throws mn::Error naming the first probe (in dispatch order) holding NaN or Inf: its graph
// node (name and op), the kernel, the element and the value.
void check_numerics(const NumericsCheck& check, const plan::StepPlan& plan,
                    const std::string& program);

}  // namespace mn::runtime
