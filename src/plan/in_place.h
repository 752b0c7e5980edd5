#pragma once
// In-place updates of persistent tensors: which kernel groups may write their result into
// their input 0's own buffer instead of a fresh one.
//
// A single group of an op with OpDef::updates_input0_in_place (cache_write) qualifies when its
// result is assigned back to the parameter or state that is its input 0 (Graph::assign): the
// assignment then needs no copy and the tensor no second buffer. That is valid only if no
// other kernel reads the old value after the write, so every other group reading the state is
// ordered before the writer (the groups are re-sorted topologically with those extra edges,
// keeping the original order wherever it already holds). When that is impossible (a reader
// depends on the write's result, the state is also assigned elsewhere or read by another
// assignment), the group keeps the copying form. Readers of the result itself may follow.
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::plan {

// Reorders `groups` where needed and returns, per group of the new order, whether it updates
// its input 0 in place.
std::vector<char> plan_in_place(const Graph& g, std::vector<schedule::KernelGroup>& groups);

}  // namespace mn::plan
