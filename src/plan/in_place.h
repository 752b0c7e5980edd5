#pragma once
// In-place updates of persistent tensors: which outputs of which kernel groups are written into
// the buffer of one of the group's inputs instead of a fresh one.
//
// An output qualifies when it is assigned back (Graph::assign) to a parameter or state the same
// group reads, and writing it there cannot change what any kernel reads:
//  - a single group of an op with OpDef::updates_input0_in_place (cache_write), whose result is
//    assigned to its input 0;
//  - a pointwise group (one segment or several: the optimizer update of every parameter) whose
//    output has the state's type and whose state is read only by the segment computing that
//    output, at the element being computed (no broadcast): each thread loads the element before
//    it stores the new value (codegen/fused_pointwise.h), and no other thread touches it.
// The assignment then needs no copy and the tensor no second buffer. Every other group reading
// the old value is ordered before the writer (the groups are re-sorted topologically with those
// extra edges, keeping the original order wherever it already holds). Where that is impossible
// (a reader depends on the write's result, the state is also assigned elsewhere or read by
// another assignment), the output keeps its own buffer and the copy. Readers of the result
// itself may follow.
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::plan {

// Reorders `groups` where needed and returns, per group of the new order and per output of it,
// the index of the input whose buffer the output is written into, or -1 (a buffer of its own).
std::vector<std::vector<int>> plan_in_place(const Graph& g,
                                            std::vector<schedule::KernelGroup>& groups);

}  // namespace mn::plan
