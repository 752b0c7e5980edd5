#pragma once
// Mixed precision: the products of a graph computed from 16-bit operands, as PyTorch's autocast
// does. Every matmul of f32 operands becomes cast(matmul(cast(a, p), cast(b, p)), f32): the
// operands are rounded to p (bf16 or f16), the product accumulates in f32 and is stored in p,
// and its consumers read it widened back to f32. Everything else (norms, softmax, losses,
// reductions, the optimizer's master weights and states) stays in f32. Applied to a training
// graph after differentiation, the backward products are 16-bit too.
//
// An operand that is already a widening of a p tensor (a bf16 weight read as f32) is used as it
// is, so a model stored in p is not rounded twice. Runs before the e-graph (plan::make_step_plan),
// so the casts fuse into their producers and consumers like any pointwise op.
#include <meganeura/dtype.h>
#include <meganeura/graph.h>

namespace mn::optimize {

// The rewritten graph (same inputs, parameters, states, outputs and assignments). `precision`
// f32 copies the graph; bf16 and f16 rewrite it; any other dtype is an mn::Error.
Graph with_mixed_precision(const Graph& g, DType precision);

}  // namespace mn::optimize
