#pragma once
// What the matmul kernels (scalar tiled, GEMV, cooperative-matrix) share: the geometry of a
// batched matmul node with broadcast batch dims and transposed operands.
#include <cstdint>
#include <optional>
#include <string>

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

// Statements declaring `uint abase` and `uint bbase`, the operands' offsets for the output
// batch in `uint bz`.
std::string batch_bases(const MatmulGeometry& g);

// Work a GEMV kernel does beside its product (schedule/gemv_fusion.h), both bound after the
// epilogue's operands:
//  - norm: the vector read through rms_norm. x·Wᵀ with x = rms_norm(x0, gamma) over its one row
//    is rstd(x0) · Σ_k x0[k]·gamma[k]·W[p, k], so the kernel reads x0 (its input 0) and gamma
//    and needs no normalized copy.
//  - sibling: a second matrix of B's shape and layout, multiplied by the same vector in the
//    same pass; its product at the element being stored is `mm_sibling` in the epilogue.
//    The tensor-addressed kernel takes a sibling too, of any A (tensor_takes_sibling in
//    lower_matmul_tensor.h: a prompt's gate and up projections in one kernel).
//  - stacked: further products of the same vector with matrices of the same K and layout but
//    their own rows, each stored into its own output (a decoding layer's q, k and v
//    projections: one launch). Their outputs follow the product's rows in the kernel's grid;
//    neither an epilogue nor a sibling goes with them.
//  - chain: a second product reading this one's stored value h (after the epilogue) as its
//    vector, y = D·h (+ residual), stored as output 1 (a decoding MLP's down projection after
//    gate·up, with the residual stream: one launch and one barrier fewer a layer). Each
//    workgroup multiplies its own outputs of h by their columns of D, loaded as the kernel
//    starts, into a partial of y in scratch; the last workgroup to finish (counted in a
//    counter it sets back to zero) adds the partials in workgroup order, then the residual.
//    Only with the workgroup size gemv_chain_threads gives.
//  - combine: input 0 holds a decoding attention's partials (attention_lowering::PartialsLayout:
//    `splits` key ranges per head of `dv` values, heads·dv = K, then each head's count of
//    ranges holding keys), not the vector: every workgroup first combines the counted ranges
//    into the vector in shared memory (each element's ranges weighted by exp(max - the head's
//    max), divided by the weighted sums), the attention's own last workgroup, its count across
//    workgroups and its second round trip through memory gone. The subgroup's first row of the
//    matrix is loaded before, in flight beside the partials.
struct GemvExtras {
  bool norm = false;
  double eps = 1e-6;
  int gamma_input = -1;  // the group input holding gamma; -1: no gamma
  DType gamma_dtype = DType::f32;
  int sibling_input = -1;  // the group input holding the second matrix; -1: none
  DType sibling_dtype = DType::f32;
  // The sibling product's own dtype: a 16-bit product is rounded to it, as its store would.
  DType sibling_product_dtype = DType::f32;
  struct Stacked {
    int matrix_input = -1;  // the group input holding the matrix [rows, K]
    DType matrix_dtype = DType::f32;
    int64_t rows = 0;
    DType out_dtype = DType::f32;  // stored into ArgRef::output(j + 1)
  };
  std::vector<Stacked> stacked;
  struct Chain {
    int matrix_input = -1;  // the group input holding D [outs, P], contiguous along P
    DType matrix_dtype = DType::f32;
    int64_t outs = 0;
    int residual_input = -1;  // the group input added to y ([outs], f32); -1: none
    DType out_dtype = DType::f32;
  };
  std::optional<Chain> chain;
  struct Combine {
    int64_t splits = 0, dv = 0;
  };
  std::optional<Combine> combine;
};

// The workgroup size of a GEMV kernel with `p` outputs chaining a product of `outs` outputs
// (GemvExtras::chain) on this device, or 0 where the chain does not fit: the last workgroup
// adds at most 64 partials, each lane holds at most 16 quads of D's columns, and a
// workgroup's outputs of h are a multiple of 4.
uint32_t gemv_chain_threads(const DeviceTraits& device, int64_t p, int64_t outs);

// The kernel of this product takes GemvExtras: a GEMV of one batch with the vector as input 0
// (x·Wᵀ), its matrix contiguous along K, on the subgroup kernel.
bool gemv_takes_extras(const LowerContext& ctx);

// The scalar tiled kernel of this product takes these extras: a norm of A's rows over K (a
// prompt's or a denoising step's q/k/v and gate/up read the normalized hidden state): every
// workgroup finds its rows' scale in a pass over them, the gain scales A as it is staged and the
// scale each stored sum; and a sibling (gate and up: a second matrix of B's shape, layout and
// dtype, staged beside B, its f32 product `mm_sibling` in the epilogue). Nothing else, where no
// other kernel (GEMV, tensor-addressed, cooperative) takes the product and A is not transposed.
bool tiled_takes_extras(const LowerContext& ctx, const GemvExtras& x);

// M = 1 or N = 1 (codegen/lower_gemv.cpp): out[bz, p] = sum_k vec[k] · mat[p, k].
Lowering lower_gemv(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                    const MatmulEpilogue* e, const GemvExtras* extras = nullptr);

// The matmul node's kernels with `e` (may be null) applied to every stored value. Bindings:
// A = input(0), B = input(1), C = output(), then e->extra at bindings 3, 4, ...
// `extras` (may be null) only where gemv_takes_extras(ctx). With ctx.stored_perm only where
// matmul_stores_permuted(ctx), without extras.
Lowering lower_matmul_fused(const LowerContext& ctx, const MatmulEpilogue* e,
                            const GemvExtras* extras = nullptr);

// Whether the kernel chosen for this product can store it reshaped to *ctx.stored_shape and
// permuted by *ctx.stored_perm: the tensor-addressed kernel through its tiles' strides
// (tensor_permuted_row_stride), every other kernel (scalar, cooperative, GEMV) element by
// element through its C_st, which the permuted store rewrites (codegen/store_rewrites.h).
bool matmul_stores_permuted(const LowerContext& ctx);

}  // namespace mn::codegen
