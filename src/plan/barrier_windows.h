#pragma once
// The barrier windows of a plan's dispatch order: runs of launches none of which reads or writes
// a buffer an earlier launch of its run writes, nor writes one an earlier launch of it reads
// (data dependencies between the plan's buffers, before any two share memory; a recording adds
// barriers where shared memory makes other buffers meet). Each window ends in a barrier, so
// their count is what the order costs in barriers; the dependency depth is the fewest any
// order of the same launches could have.
#include <cstddef>
#include <vector>

#include "plan/step_plan.h"

namespace mn::plan {

// For each launch, the last launch of its window. The memory plan's form counts the index region
// (codegen/index_check.h) as one buffer; `separate_index_slots` counts each launch's slot of it
// as its own, as a recording's byte ranges do.
std::vector<int> barrier_run_ends(const std::vector<PlannedLaunch>& launches,
                                  bool separate_index_slots = false);

// The number of windows of the plan's order (index slots separate).
size_t barrier_windows(const std::vector<PlannedLaunch>& launches);

// The longest chain of launches each of which must wait for the one before it (it reads what that
// one writes, or writes what it reads or writes).
size_t dependency_depth(const std::vector<PlannedLaunch>& launches);

}  // namespace mn::plan
