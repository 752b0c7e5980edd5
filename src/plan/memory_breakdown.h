#pragma once
// What fills a step plan's arena: the persistent tensors by kind, and the transient ones at the
// moment most of them are live, by role.
//
// Transient values are split by where they come from: a value the graph's outputs depend on
// (the forward pass of a training step, all of an inference step) is an activation; a value only
// the assignments need (gradients, the optimizer's temporaries) is backward; kernel scratch with
// no value (split-K partials, attention partials) is workspace. The peak is the launch at which
// the live transient bytes are greatest; the arena's transient region can be larger than that
// sum (placement does not pack perfectly), never smaller.
#include <cstdint>

#include "plan/step_plan.h"

namespace mn::plan {

struct MemoryBreakdown {
  // Persistent (one buffer each for the whole session).
  uint64_t parameter_bytes = 0;
  uint64_t state_bytes = 0;  // optimizer moments, running statistics, caches
  uint64_t io_bytes = 0;     // inputs, outputs and constants
  uint64_t persistent_workspace_bytes = 0;  // counters, index slots
  // Transient, live at the peak.
  int peak_launch = -1;  // -1: nothing transient
  uint64_t activation_bytes = 0;
  uint64_t backward_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t transient_region_bytes = 0;  // the arena's bytes past the persistent ones

  uint64_t peak_bytes() const { return activation_bytes + backward_bytes + workspace_bytes; }
};

MemoryBreakdown memory_breakdown(const StepPlan& p);

}  // namespace mn::plan
