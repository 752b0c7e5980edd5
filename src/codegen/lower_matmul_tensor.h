#pragma once
// Matmul on tensor-addressed workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2
// with tensor addressing and per-element operations; template kernels/matmul_tensor.comp,
// compiled with the current glslang). Where the device and the compiler offer it, it replaces
// the workgroup-scope kernel of lower_matmul_coop_wg.h for f16 operands: loads go through
// tensor layouts (bulk copies, zeros past ragged edges, so operands need not be whole tiles),
// the epilogue runs per element and the matrix store writes the result. See
// docs/tensor-cores.md.
#include <optional>
#include <span>
#include <string>

#include "codegen/kernel.h"
#include "codegen/lower_matmul.h"
#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

// A bm×bn output tile per workgroup of `invocations`, in K steps of bk, `unroll` steps per loop
// iteration.
struct TensorTile {
  const char* name = "";
  int bm = 0, bn = 0, bk = 0, unroll = 1;
  uint32_t invocations = 0;
  // Only for products no other tensor-core kernel serves (bf16): f16 products this small run
  // faster on the subgroup-scope kernel.
  bool bf16_only = false;
  bool forced_only = false;  // taken only when MN_COOP_TENSOR_TILE names it
};

std::span<const TensorTile> tensor_tiles();

// Why the tensor-addressed kernel is not used for this product (empty: it is).
std::string tensor_matmul_rejection(const LowerContext& ctx, const MatmulGeometry& g,
                                    int64_t batch);

// The tile for this shape: the largest whose grid fills the device;
// DeviceTraits::coop_tensor_tile (MN_COOP_TENSOR_TILE) forces one wherever it fits. None when
// no tile applies.
// With a sibling product (two accumulators), only tiles whose accumulator holds at most
// kSiblingAccumulatorPerInvocation floats per invocation are considered.
std::optional<int> choose_tensor_tile(const LowerContext& ctx, const MatmulGeometry& g,
                                      int64_t batch, bool sibling = false);
// Two such accumulators take the registers one 64 × 64 tile's does on 64 invocations.
inline constexpr int kSiblingAccumulatorPerInvocation = 32;
// A product with a sibling is one whose own tile would be at most 64 × 64 (a prompt's or a
// short training step's): larger products keep their large tiles, one product each.
inline constexpr int64_t kSiblingMaxAloneArea = 64 * 64;

// Where the kernel chosen for this product stores it reshaped to *ctx.stored_shape and permuted by
// *ctx.stored_perm (LowerContext), the stored tensor's stride between a tile's rows; nullopt
// where it cannot: the batch axes and M keep their extents, N is split into trailing axes of
// which the tile's columns stay within the last (which the permutation keeps last), no sibling.
std::optional<int64_t> tensor_permuted_row_stride(const LowerContext& ctx);

// Whether the kernel chosen for this product takes these extras: a sibling (GemvExtras), no norm
// or stacked products, a product small enough (kSiblingMaxAloneArea) and a tile for two
// accumulators whose shared copy of the sibling's fits.
bool tensor_takes_extras(const LowerContext& ctx, const GemvExtras& x);
// Whether tile `t` can hold a sibling's accumulator beside its own.
bool tensor_tile_takes_sibling(const TensorTile& t, const DeviceTraits& device);

// Bindings: A, B, C, then the epilogue's extra operands, then a sibling's matrix (extras); with
// K split (a grid of tiles too small to fill the device, never with a sibling), the f32 partial
// sums (scratch 0) and the per-tile counters.
// A sibling's product (S, of B's shape and layout) accumulates beside C's from the same A
// loads; before the epilogue its accumulator is copied to shared memory, where `mm_sibling`
// reads the element being finished.
Lowering lower_matmul_tensor(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                             const TensorTile& t, const MatmulEpilogue* e,
                             const GemvExtras* extras = nullptr);

}  // namespace mn::codegen
