#pragma once
// A rotary embedding reads its operand through the permute that makes it (the heads split out of
// a projection: permute(reshape(x·Wᵀ), {0, 2, 1, 3})) and stores its result through the permute
// that reads it (a gradient's heads merged back), when that permute is read by nothing else: the
// permute's launch and its tensor disappear, for the query and key of every layer, forward and
// backward (codegen/lower_attention_rope.cpp addresses the operand and the result by strides).
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::schedule {

// Folds such permutes into the rotations' single groups (KernelGroup::load_perm, store_perm)
// and drops their groups; the order of the remaining groups is kept. Run after the passes that
// move rotations into other kernels (rope_fusion.h), which then no longer apply.
void fold_permutes_into_rotations(const Graph& g, std::vector<KernelGroup>& groups);

}  // namespace mn::schedule
