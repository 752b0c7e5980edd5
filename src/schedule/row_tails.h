#pragma once
// A pointwise kernel over a reduction's rows that reads the rows' reduced values joins the
// reduction's kernel as its row tail (codegen/fused_reduce.h): once a workgroup has a row's value
// it applies the pointwise work to the row's elements, which are still in its caches. An
// RMSNorm's statistics and the normalized row (forward), its backward's row sum and the input
// gradient, a softmax backward's row sum and dS: one launch and one barrier instead of two.
//
// Taken where the reduction is over the innermost axis of its operand alone, keeps that axis as
// 1 in its f32 result, and reduces each row in one workgroup (codegen::reduce_takes_row_tail);
// the pointwise kernel has one segment over the reduction's operand shape, belongs to the same
// pass (forward or backward) and stores no value assigned to a state. The merged kernel takes
// the reduction's place in the order when the pointwise kernel's other operands exist by then,
// else the pointwise kernel's place when nothing in between reads the reduction's value.
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// Merges such pairs: the reduction group gains the pointwise group's segment (segments[2]), its
// nodes, inputs and outputs (outputs 1, 2, ...); the other group is dropped.
void fuse_row_tails(const Graph& g, std::vector<KernelGroup>& groups,
                    const codegen::DeviceTraits& device, uint32_t max_bindings);

}  // namespace mn::schedule
