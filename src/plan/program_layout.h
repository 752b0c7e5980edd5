#pragma once
// Several step plans in one arena (a session running several programs, e.g. the prefill and
// decode graphs of generation): parameters and states with the same name are one buffer shared
// by every program; each program's other persistent tensors (inputs, outputs, constants) have
// their own bytes; the intermediates of all programs share one region, since only one program
// runs at a time.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/step_plan.h"

namespace mn::plan {

struct ProgramsLayout {
  uint64_t arena_bytes = 0;
  uint64_t shared_bytes = 0;  // the shared parameters and states
  // Per program: its own persistent bytes and its intermediates' region.
  std::vector<uint64_t> own_bytes, transient_bytes;
};

// Rewrites the buffer offsets of every plan (named by `names`, for errors) into one arena.
// mn::Error when a shared name has different types (or kinds) in two programs. One plan keeps
// its own layout.
ProgramsLayout place_programs(const std::vector<StepPlan*>& plans,
                              const std::vector<std::string>& names, uint64_t alignment,
                              uint64_t chunk_bytes);

}  // namespace mn::plan
