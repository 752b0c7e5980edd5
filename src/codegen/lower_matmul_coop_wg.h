#pragma once
// Cooperative-matrix matmul with workgroup-scope matrices (VK_NV_cooperative_matrix2 through
// SPV_KHR_cooperative_matrix types): the whole workgroup owns one bm×bn f32 accumulator and
// multiplies bm×bk by bk×bn f16 matrices loaded straight from memory, leaving the staging,
// the split among subgroups and the pipelining to the driver, which can use instructions a
// subgroup-scope kernel cannot reach (warpgroup matrix units on Hopper). See
// docs/tensor-cores.md.
#include <array>
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
// The same for any bm×bn×bk tile of `invocations` against a granularity table indexed as
// DeviceTraits::coop_wg_granularity (f16) or coop_wg_bf16_granularity.
bool workgroup_tile_fits(int bm, int bn, int bk, uint32_t invocations,
                         const std::array<std::array<uint32_t, 3>, 4>& granularity,
                         const DeviceTraits& d);
// Workgroup tile i is supported and passed the device's self-test.
bool coop_wg_tile_usable(size_t i, const DeviceTraits& d);

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

// The product kernel the front ends (matmul, implicit-GEMM convolution) share: its main()
// and the matrix types, given buffers HA and HB (float16_t[]), C (direct store) or WS (coherent
// float[]) declared by the caller. Workgroup `wid` computes batch bz's tile at (row0, col0).
struct CoopWgProduct {
  const CoopWgTile* tile = nullptr;
  int64_t batches = 1, row_tiles = 0, col_tiles = 0;
  int64_t m = 0, n = 0;         // valid extents: values past them are not stored
  bool ta = false, tb = false;  // A stored K×M (column-major load), B stored N×K
  int64_t lda = 0, ldb = 0;
  std::string setup;                  // statements after bz is known
  std::string a_base, b_base;         // offsets (halves) of batch bz's operands
  std::string k_begin = "0u", k_end;  // K range of the loop (multiples of bk)
  std::string scale;                  // float expression the accumulator is multiplied by, or empty
  // Direct store: `direct_offset` (of element (row0, col0)) into f32 C of leading dimension ldc.
  std::string direct_offset;
  int64_t ldc = 0;
  // Otherwise the tile goes to WS at ((bz·row_tiles + row) · col_tiles + col) · bm·bn; then, if
  // non-empty, `store` runs for each in-bounds (bz, gm, gn) with its `float v`.
  std::string store;
};
std::string coop_wg_product(const CoopWgProduct& p);
std::string coop_wg_header();
// HA and HB at bindings a_binding, a_binding + 1; WS at w_binding when with_w.
std::string coop_wg_operand_buffers(uint32_t a_binding, uint32_t w_binding, bool with_w);
// The exponent of a packed operand of `halves` elements in buffer `name`, as a GLSL int.
std::string coop_wg_exponent(const std::string& name, int64_t halves);
// A 2-D grid of `groups` workgroups within the device's limits.
std::array<uint32_t, 3> coop_wg_grid(int64_t groups, const DeviceTraits& d, const char* what);

// Bindings: A, B, C, the epilogue's extra operands, then (unless the f32 result is stored
// directly) an f32 scratch of the tiles.
Lowering lower_matmul_coop_wg(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                              const CoopWgTile& t, const MatmulEpilogue* e);

}  // namespace mn::codegen
