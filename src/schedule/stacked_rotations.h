#pragma once
// Two rotations by the same positions (a layer's query and key, forward or backward) run as one
// kernel: the second's pairs follow the first's in the grid, the frequency table is filled once,
// and one launch disappears. Taken where both are rotations of one kind with the same attributes,
// positions and head size, each on its own with one output, and the second's operand exists
// when the first runs; each keeps the permutes it reads and stores through
// (schedule/permuted_rotations.h), and each may then store a twin (schedule/narrowed_stores.h).
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::schedule {

// The first group gains the second's node and output (output 1) and its operand as an input;
// the second group is dropped.
void stack_rotations(const Graph& g, std::vector<KernelGroup>& groups);

}  // namespace mn::schedule
