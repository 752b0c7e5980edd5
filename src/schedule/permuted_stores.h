#pragma once
// A kernel whose result only a permute reads stores the result in the permute's layout, and the
// permute's launch and its barrier disappear: attention's output stored with its heads merged
// back into the hidden axis, a value gradient's sum over a key/value head's group stored merged.
// Taken by single kernels that store only through their output's generic store
// (codegen::stores_only_through_out_st: attention, softmax, normalizations, rotations the rotation
// pass left), by reduction kernels without a row tail, and by single products whose
// tensor-addressed kernel can store each tile through strides
// (codegen::tensor_permuted_row_stride: attention's gradients split into heads before their
// products, merged back after); copies keep their own (a permute of a permute is the e-graph's).
// Runs after the passes that give a kernel a second output.
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// The group gains the permute's node, its output becomes the permute's value and
// `stored_permuted` its permutation; the permute's group is dropped.
void fold_permutes_into_stores(const Graph& g, std::vector<KernelGroup>& groups,
                               const codegen::DeviceTraits& device);

// A single kernel storing only through its output's generic store whose output 0 other kernels
// read beside a lone permute (attention's output in a training step: the backward reads it as it
// is, the output projection merged by heads) stores the permute's value too, as one more output
// (KernelGroup::permuted_twin); the permute's group is dropped. Runs after the passes that give
// kernels their second outputs (saved_lse.h), so that the twin is the last output.
void fold_permutes_into_twin_stores(const Graph& g, std::vector<KernelGroup>& groups);

}  // namespace mn::schedule
