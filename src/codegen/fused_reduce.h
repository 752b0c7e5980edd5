#pragma once
// Pointwise work fused into a reduction kernel: a prologue computing the reduced operand in the
// loads (sum(x * x), mean(exp(x - m)), the squared gradients of norm clipping), so that operand
// is never stored, and an epilogue applied to each reduced value before its store
// (rsqrt(mean + eps), a scale).
#include <span>
#include <string>
#include <vector>

#include "codegen/kernel.h"

namespace mn::codegen {

struct ReduceFusion {
  // GLSL placed after the reduction's own helpers (which define mn_isnan): storage buffers for
  // `extra` at bindings 2, 3, ... (after the output or partials at 1) and the functions below.
  std::string declarations;
  std::vector<ArgRef> extra;  // binding 2 + i
  // The declarations define `float in_ld(uint i)`, element i (row-major) of the reduced operand,
  // which is then not bound (binding 0 repeats extra[0], which must exist).
  bool prologue = false;
  // The declarations define `float mn_reduce_epilogue(float v, uint o)`, the value stored for
  // output element o whose reduction is v.
  bool epilogue = false;
  // The dtype the epilogue's value is stored in: f32, or a 16-bit float when the epilogue ends
  // in a narrowing cast (the store rounds as the cast does).
  DType stored = DType::f32;
  // The declarations define `void mn_row_tail(uint e, float v)`, called for every element e of
  // a row once the row's value v (after the epilogue, as stored) is known: pointwise work over
  // the rows that reads their reduction (a norm applied, a softmax's backward), which then
  // needs no launch of its own. Only where reduce_takes_row_tail says so. It stores through
  // `tail_outputs`, bound at 2 + extra.size() + j.
  bool tail = false;
  std::vector<ArgRef> tail_outputs;
};

// Whether `node` is a reduction that takes a prologue and an epilogue: sum, mean, max, min or
// sum_to (one that reduces something) over f32 values.
bool reduce_accepts_fusion(const Node& node, std::span<const TensorType> inputs);

// Whether the reduction takes a row tail on `device`: one that reduce_accepts_fusion takes, over
// the innermost axis of a contiguous operand alone (element e of the operand is row e / n,
// column e % n), whose rows are each reduced by one workgroup in one launch.
bool reduce_takes_row_tail(const Node& node, std::span<const TensorType> inputs,
                           const DeviceTraits& device);

// The reduction node's kernels with `f` applied (the node's own lowering when null).
Lowering lower_reduce_fused(const LowerContext& ctx, const ReduceFusion* f);

}  // namespace mn::codegen
