#pragma once
// The conv2d forward lowering with pointwise work fused into its store (the scheduler's conv
// epilogues; codegen/matmul_epilogue.h gives the coordinates the epilogue sees).
#include "codegen/kernel.h"
#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

// The conv2d node's kernels with `e` (may be null) applied to every stored value (after the
// bias, when the node has one). Bindings: x = input(0), w = input(1), y = output(), then
// e->extra at bindings 3, 4, ..., then the bias (input(2)) last.
Lowering lower_conv2d_fused(const LowerContext& ctx, const MatmulEpilogue* e);

}  // namespace mn::codegen
