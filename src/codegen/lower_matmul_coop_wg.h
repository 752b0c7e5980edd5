#pragma once
// Cooperative-matrix matmul with workgroup-scope matrices (VK_NV_cooperative_matrix2 through
// SPV_KHR_cooperative_matrix types): the whole workgroup owns one bm×bn f32 accumulator and
// multiplies bm×bk by bk×bn f16 matrices loaded straight from memory, leaving the staging,
// the split among subgroups and the pipelining to the driver, which can use instructions a
// subgroup-scope kernel cannot reach (warpgroup matrix units on Hopper). See
// docs/tensor-cores.md.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "codegen/kernel.h"
#include "codegen/lower_matmul.h"
#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

// A bm×bn output tile per workgroup of `invocations`, in K steps of bk.
struct CoopWgTile {
  const char* name = "";
  int bm = 0, bn = 0, bk = 0;
  uint32_t invocations = 0;
};

// The tile configurations, smallest first. Tile i is bit kCoopWgTileBit + i of
// DeviceTraits::coop_tiles (the self-test's result).
std::span<const CoopWgTile> coop_wg_tiles();
inline constexpr int kCoopWgTileBit = 8;

// The device offers workgroup-scope matrices for the tile's workgroup size, with
// granularities that divide the tile.
bool coop_wg_tile_supported(const CoopWgTile& t, const DeviceTraits& d);

// Why the workgroup-scope kernel is not used for this node (empty: it is): the device must
// offer workgroup-scope f16·f16+f32 matrices for a tile's workgroup size and granularities
// (and the tile must have passed the self-test), the tile's grid must fill the device, and
// f16 operands must be multiples of the tile (f32 operands are packed into zero-padded
// copies). MN_COOP_WG=0 turns the kernel off.
std::string coop_wg_rejection(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch);

// The tile for this shape: the largest whose grid fills the device's multiprocessors;
// MN_COOP_WG_TILE=<name> forces one wherever it fits. None when no tile applies.
std::optional<int> choose_coop_wg_tile(const LowerContext& ctx, const MatmulGeometry& g,
                                       int64_t batch);

// Bindings: A, B, C, the epilogue's extra operands, then (unless the f32 result is stored
// directly) an f32 scratch of the tiles.
Lowering lower_matmul_coop_wg(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                              const CoopWgTile& t, const MatmulEpilogue* e);

}  // namespace mn::codegen
