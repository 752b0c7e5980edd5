#pragma once
// The workgroup-scope matrices of attention's tensor-addressed kernels
// (lower_attention_tensor.h, lower_attention_training_tensor.h): a workgroup owns a tile of rows
// (query rows of the forward and of attention_grad_q, key rows of attention_grad_k and _v) and
// walks the other side in blocks; its matrices are rows × D, rows × DV, rows × block and the
// blocks'. The tiles are attention_tensor_tiles(), each kernel family choosing its own.
#include <array>
#include <cstdint>
#include <span>

#include "codegen/kernel.h"

namespace mn::codegen {

// A tile: a workgroup of `invocations` owns `rows` rows and walks the other side in blocks of
// `cols`. invocations 0: by head size (tensor_attention_invocations). Fewer
// invocations per workgroup keep more of a row's softmax (its reductions over the block, the
// accumulators' conversion to A-matrices) within one subgroup.
struct AttentionTensorTile {
  const char* name = "";
  uint64_t rows = 0, cols = 0;
  uint32_t invocations = 0;
};

// The tiles, the default first.
std::span<const AttentionTensorTile> attention_tensor_tiles();

// The forward's tile on `device` for `heads` (batch × heads) of `rows` query rows:
// DeviceTraits::tensor_attention_tile (MN_TENSOR_ATTENTION_TILE) by name; else the large-grid
// tile where its grid gives every multiprocessor two workgroups and it fits, else the default;
// its invocations resolved for heads of d and dv. heads or rows 0: the default.
AttentionTensorTile forward_attention_tile(const DeviceTraits& device, uint64_t d, uint64_t dv,
                                           uint64_t heads = 0, uint64_t rows = 0);
// The gradient kernels' tile for `heads` of `rows` own rows (queries for attention_grad_q, keys
// for attention_grad_k and _v): DeviceTraits::tensor_attention_grad_tile
// (MN_TENSOR_ATTENTION_GRAD_TILE), likewise.
AttentionTensorTile training_attention_tile(const DeviceTraits& device, uint64_t d, uint64_t dv,
                                            uint64_t heads = 0, uint64_t rows = 0);

// Workgroups of 128 invocations up to heads of 64, 256 above (the registers of a 64 × 128
// accumulator and its operands would not fit 128 invocations).
uint32_t tensor_attention_invocations(uint64_t d, uint64_t dv);

// Whether heads of d (queries, keys) and dv (values) elements suit the gradient kernels' tile
// `t` (invocations resolved): 16 to 128 in steps of 16, their products (rows × cols over d and
// over dv, rows × d and rows × dv over cols) in the device's workgroup-scope `granularity`
// (coop_wg_granularity or coop_wg_bf16_granularity).
bool training_attention_fits(const AttentionTensorTile& t, uint64_t d, uint64_t dv,
                             const std::array<std::array<uint32_t, 3>, 4>& granularity,
                             const DeviceTraits& device);

// Whether they suit the forward's tile `t` (invocations resolved, at least one a row): its
// products Q·Kᵀ (rows × cols over d), P·ones (rows × cols over cols) and P·V (rows × dv over
// cols) in `granularity`.
bool forward_attention_fits(const AttentionTensorTile& t, uint64_t d, uint64_t dv,
                            const std::array<std::array<uint32_t, 3>, 4>& granularity,
                            const DeviceTraits& device);

// How the blocks of the other side that a kernel's tiles walk are shared among workgroups:
// segments of `segment` blocks, up to `splits` of them a tile (1: each tile's workgroup walks all
// of its blocks). The tiles' workgroups wait on each block's loads one after another, so a grid
// too small for the device (a causal 8 × 512 step's dK and dV: 192 tiles, the first walking 24
// blocks, the last 3) is bound by its longest tiles; split, every segment's result is stored and
// the tile's last workgroup combines them in segment order.
struct BlockSplit {
  uint64_t segment = 0, splits = 1;
};
// Segments of 2 blocks made the 1 × 256 bf16 step's forward (9 heads × 4 tiles) slower (13.12 -
// 13.20 ms against 13.06 - 13.10 unsplit, H100): storing and combining the partials costs about
// what two blocks do.
inline constexpr uint64_t kMinSegmentBlocks = 4;

// The split of tiles walking blocks[t] blocks (t: the tile of a head; every one of `heads` heads
// alike): segments enough for `fills` fills of the device, none shorter than kMinSegmentBlocks;
// fills 0, or segments as long as the longest tile's blocks, split nothing.
BlockSplit split_tile_blocks(const DeviceTraits& device, std::span<const uint64_t> blocks,
                             uint64_t heads, uint32_t fills);

}  // namespace mn::codegen
