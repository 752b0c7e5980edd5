#pragma once
// A kernel whose result only a permute reads stores the result in the permute's layout, and the
// permute's launch and its barrier disappear: attention's output stored with its heads merged
// back into the hidden axis, a value gradient's sum over a key/value head's group stored merged.
// Taken by single kernels that store only through their output's generic store
// (codegen::stores_only_through_out_st: attention, softmax, normalizations, rotations the rotation
// pass left) and by reduction kernels without a row tail; copies keep their own (a permute of a
// permute is the e-graph's). Runs after the passes that give a kernel a second output.
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::schedule {

// The group gains the permute's node, its output becomes the permute's value and
// `stored_permuted` its permutation; the permute's group is dropped.
void fold_permutes_into_stores(const Graph& g, std::vector<KernelGroup>& groups);

}  // namespace mn::schedule
