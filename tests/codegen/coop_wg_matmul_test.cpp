// The workgroup-scope cooperative-matrix matmul on the CPU side (lavapipe has no cooperative
// matrices; results are checked on the device by tests/tensor_cores): every tile
// compiles in every operand layout and dtype, rewrites to KHR types of workgroup scope, and is
// chosen only where the device offers such matrices and the tile divides the shape.
#include <cstdlib>
#include <memory>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "codegen/glsl.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/shader/shader_compiler.h"
#include "codegen/shader/spirv_coop_khr.h"

namespace mn::codegen {
namespace {

using testing::matmul_node;

DeviceTraits wg_traits() { return testing::h200_wg_traits(); }

// Words of the first instruction with this opcode, or empty.
std::vector<std::vector<uint32_t>> instructions_with(const std::vector<uint32_t>& spirv,
                                                     uint32_t opcode) {
  std::vector<std::vector<uint32_t>> out;
  for (size_t i = 5; i < spirv.size();) {
    const uint32_t n = spirv[i] >> 16;
    if ((spirv[i] & 0xffffu) == opcode) out.emplace_back(spirv.begin() + i, spirv.begin() + i + n);
    i += n ? n : 1;
  }
  return out;
}

// The halves a packed operand's scratch buffer holds before its exponent: padded extents.
TEST(CoopWgMatmul, CompilesToWorkgroupScopeKhrTypes) {
  const DeviceTraits t = wg_traits();
  for (const CoopWgTile& tile : coop_wg_tiles()) {
    for (int layout = 0; layout < 4; ++layout) {
      for (DType dt : {DType::f32, DType::f16}) {
        for (bool ragged : {false, true}) {
          if (ragged && dt == DType::f16) continue;  // f16 operands must be whole tiles
          const bool ta = layout & 1, tb = layout & 2;
          SCOPED_TRACE(std::string(tile.name) + " ta=" + std::to_string(ta) +
                       " tb=" + std::to_string(tb) + " " + std::string(dtype_name(dt)) +
                       (ragged ? " ragged" : ""));
          const int64_t m = ragged ? 300 : 512, n = ragged ? 520 : 512, k = ragged ? 100 : 256;
          auto mm = matmul_node(ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}, ta,
                                tb, dt);
          const auto ctx = mm->ctx(t);
          const Lowering l = lower_matmul_coop_wg(ctx, geometry(ctx), 1, tile, nullptr);
          ASSERT_EQ(l.launches.size(), dt == DType::f32 ? 5u : 1u);
          const KernelLaunch& kl = l.launches.back();
          EXPECT_TRUE(kl.coop_khr);
          EXPECT_EQ(kl.workgroup[0], tile.invocations);
          const int64_t mp = (m + tile.bm - 1) / tile.bm, np = (n + tile.bn - 1) / tile.bn;
          EXPECT_EQ(kl.groups[0] * kl.groups[1], static_cast<uint32_t>(mp * np));
          // Whole f32 tiles without epilogue: stored by the matrix store, no scratch.
          const bool direct = dt == DType::f32 && !ragged;
          EXPECT_EQ(kl.bindings.size(), direct ? 3u : 4u);
          if (dt == DType::f32) {
            // Packed copies padded to whole tiles: K to 64, M and N to the tile.
            const int64_t kp = (k + 63) / 64 * 64;
            EXPECT_EQ(l.scratch_bytes[0], static_cast<uint64_t>(mp * tile.bm * kp * 2 + 16));
            EXPECT_EQ(l.scratch_bytes[2], static_cast<uint64_t>(np * tile.bn * kp * 2 + 16));
            for (size_t p = 0; p + 1 < l.launches.size(); ++p) {
              EXPECT_NO_THROW(compile_glsl(l.launches[p].glsl, CompileOptions{}));
            }
          }
          CompileOptions co;
          co.coop_khr = true;
          const auto khr = compile_glsl(kl.glsl, co);
          EXPECT_FALSE(uses_nv_cooperative_matrix(khr));
          // OpTypeCooperativeMatrixKHR (4456): result, component, scope, rows, cols, use.
          // Three types (A, B, accumulator), all of workgroup scope (2) and tile-sized.
          const auto types = instructions_with(khr, 4456);
          ASSERT_EQ(types.size(), 3u);
          std::map<uint32_t, uint32_t> constants;  // OpConstant ids → values
          for (const auto& c : instructions_with(khr, 43)) {
            if (c.size() == 4) constants[c[2]] = c[3];
          }
          for (const auto& ty : types) {
            EXPECT_EQ(constants[ty[3]], 2u);
            const uint32_t rows = constants[ty[4]], cols = constants[ty[5]];
            const auto bm = static_cast<uint32_t>(tile.bm), bn = static_cast<uint32_t>(tile.bn),
                       bk = static_cast<uint32_t>(tile.bk);
            EXPECT_TRUE((rows == bm && cols == bk) || (rows == bk && cols == bn) ||
                        (rows == bm && cols == bn));
          }
        }
      }
    }
  }
}

TEST(CoopWgMatmul, EpilogueGoesThroughTheScratch) {
  const DeviceTraits t = wg_traits();
  auto mm = matmul_node({3, 256, 128}, {128, 256}, false, false, DType::f32);
  const auto ctx = mm->ctx(t);
  MatmulEpilogue e;
  e.declarations = glsl::buffer(3, DType::f32, "bias", true);
  e.body = "return max(acc + bias_ld(n), 0.0);";
  e.extra = {ArgRef::input(2)};
  const Lowering l = lower_matmul_coop_wg(ctx, geometry(ctx), 3, coop_wg_tiles()[0], &e);
  const KernelLaunch& k = l.launches.back();
  ASSERT_EQ(k.bindings.size(), 5u);
  EXPECT_EQ(k.bindings[3].arg, ArgRef::input(2));
  EXPECT_EQ(k.bindings[4].arg, ArgRef::scratch(4));
  EXPECT_TRUE(k.bindings[4].written);
  // One f32 slot per tile: 3 batches × 2 × 2 tiles of 128×128.
  EXPECT_EQ(l.scratch_bytes.back(), 12u * 128 * 128 * 4);
  EXPECT_NE(k.glsl.find("float v = WS[wbase + i]"), std::string::npos);
  EXPECT_NE(k.glsl.find("mm_epilogue(v, bz, gm, gn)"), std::string::npos);
  CompileOptions co;
  co.coop_khr = true;
  EXPECT_NO_THROW(compile_glsl(k.glsl, co));
}

TEST(CoopWgMatmul, UsedOnlyWhereTheDeviceAndShapeAllow) {
  DeviceTraits t = wg_traits();
  auto big = matmul_node({4096, 1024}, {1024, 4096}, false, false, DType::f32);
  auto ctx = big->ctx(t);
  EXPECT_EQ(coop_wg_rejection(ctx, geometry(ctx), 1), "");
  // The largest tile whose grid fills the 132 multiprocessors: 32×16 tiles of 128×256.
  EXPECT_STREQ(
      coop_wg_tiles()[static_cast<size_t>(*choose_coop_wg_tile(ctx, geometry(ctx), 1))].name,
      "w128x256");
  // 2048²: 128×256 gives 128 workgroups, 128×128 gives 256.
  auto mid = matmul_node({2048, 2048}, {2048, 2048}, false, false, DType::f32);
  auto mctx = mid->ctx(t);
  EXPECT_STREQ(
      coop_wg_tiles()[static_cast<size_t>(*choose_coop_wg_tile(mctx, geometry(mctx), 1))].name,
      "w128x128");
  // 1024²: no tile fills the device, the subgroup kernel's smaller tiles are faster.
  auto small = matmul_node({1024, 1024}, {1024, 1024}, false, false, DType::f32);
  auto sctx = small->ctx(t);
  EXPECT_NE(coop_wg_rejection(sctx, geometry(sctx), 1), "");
  // Ragged f32 operands are padded; ragged f16 ones are not whole tiles.
  auto ragged = matmul_node({4000, 1000}, {1000, 4000}, false, false, DType::f32);
  auto rctx = ragged->ctx(t);
  EXPECT_EQ(coop_wg_rejection(rctx, geometry(rctx), 1), "");
  auto ragged16 = matmul_node({4000, 1000}, {1000, 4000}, false, false, DType::f16);
  auto r16 = ragged16->ctx(t);
  EXPECT_NE(coop_wg_rejection(r16, geometry(r16), 1), "");
  // No workgroup-scope matrices on the device, or granularities no tile is a multiple of.
  DeviceTraits none = t;
  none.coop_wg_granularity = {};
  auto nctx = big->ctx(none);
  EXPECT_NE(coop_wg_rejection(nctx, geometry(nctx), 1), "");
  DeviceTraits coarse = t;
  coarse.coop_wg_granularity[2] = {48, 16, 16};
  coarse.coop_wg_granularity[3] = {48, 32, 16};
  auto cctx = big->ctx(coarse);
  EXPECT_NE(coop_wg_rejection(cctx, geometry(cctx), 1), "");
  // Tiles that failed the self-test are not used.
  DeviceTraits failed = t;
  failed.coop_tiles &= ~(3u << kCoopWgTileBit);
  auto fctx = big->ctx(failed);
  EXPECT_NE(coop_wg_rejection(fctx, geometry(fctx), 1), "");
  // MN_COOP_WG=0 turns it off.
  DeviceTraits off = t;
  off.coop_wg = false;
  auto octx = big->ctx(off);
  EXPECT_EQ(coop_wg_rejection(octx, geometry(octx), 1),
            "workgroup-scope kernel turned off (MN_COOP_WG=0)");
}

}  // namespace
}  // namespace mn::codegen
