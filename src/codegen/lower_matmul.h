#pragma once
// What the matmul kernels (scalar tiled, GEMV, cooperative-matrix) share: the geometry of a
// batched matmul node with broadcast batch dims and transposed operands.
#include <cstdint>

#include <meganeura/error.h>

#include "codegen/kernel.h"
#include "codegen/matmul_epilogue.h"
#include "ir/ops/matmul.h"

namespace mn::codegen {

struct MatmulGeometry {
  int64_t m = 1, n = 1, k = 1;
  Shape a_batch, b_batch, out_batch;
  bool ta = false, tb = false;
};

inline MatmulGeometry geometry(const LowerContext& ctx) {
  MatmulGeometry g;
  const auto& attrs = ctx.node.attrs.as<MatmulAttrs>();
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  g.ta = attrs.transpose_a && a.size() >= 2;
  g.tb = attrs.transpose_b && b.size() >= 2;
  if (a.size() == 1) {
    g.k = a[0];
  } else {
    g.m = g.ta ? a[a.size() - 1] : a[a.size() - 2];
    g.k = g.ta ? a[a.size() - 2] : a[a.size() - 1];
    g.a_batch.assign(a.begin(), a.end() - 2);
  }
  if (b.size() != 1) {
    g.n = g.tb ? b[b.size() - 2] : b[b.size() - 1];
    g.b_batch.assign(b.begin(), b.end() - 2);
  }
  g.out_batch = broadcast_shapes(g.a_batch, g.b_batch, "matmul");
  return g;
}

// The matmul node's kernels with `e` (may be null) applied to every stored value. Bindings:
// A = input(0), B = input(1), C = output(), then e->extra at bindings 3, 4, ...
Lowering lower_matmul_fused(const LowerContext& ctx, const MatmulEpilogue* e);

}  // namespace mn::codegen
