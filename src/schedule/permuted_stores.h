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

}  // namespace mn::schedule
