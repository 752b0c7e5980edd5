#pragma once
// Pointwise work fused into the loads of a reduction (sum(x * x), mean(exp(x - m)), the squared
// gradients of norm clipping): the reduction kernel reads its operand through `in_ld`, which
// the prologue defines from the operands of its pointwise DAG, so the reduced tensor is never
// stored.
#include <span>
#include <string>
#include <vector>

#include "codegen/kernel.h"

namespace mn::codegen {

struct ReducePrologue {
  // GLSL placed after the reduction's own helpers (which define mn_isnan): storage buffers for
  // `extra` at bindings 2, 3, ... (after the output or partials at 1) and the definition of
  // `float in_ld(uint i)`, element i (row-major) of the reduction's operand.
  std::string declarations;
  std::vector<ArgRef> extra;  // binding 2 + i; not empty (binding 0 is bound to extra[0])
};

// Whether `node` is a reduction whose operand a prologue may compute: sum, mean, max, min or
// sum_to (one that reduces something) over f32 values.
bool reduce_accepts_prologue(const Node& node, std::span<const TensorType> inputs);

// The reduction node's kernels reading its operand through `p` (the node's own lowering when
// null).
Lowering lower_reduce_fused(const LowerContext& ctx, const ReducePrologue* p);

}  // namespace mn::codegen
