// Every tensor-core matmul kernel run on the device against float64, within the bounds of the
// f16-operand model (f16_model.h): each subgroup-scope tile through GL_NV_cooperative_matrix
// and through the SPV_KHR rewrite, each workgroup-scope tile, in every operand layout, with
// ragged edges, broadcast batches, scalar and vector loads, one and two shared stages, f16
// operands and outputs (16-bit storage), operands far from 1 (the packing's power-of-two
// scale), and fused epilogues. On a device without cooperative matrices (lavapipe in CI) every
// test skips, saying why; scripts/test_gpu.sh sets MN_REQUIRE_COOP so that there they fail.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/lower_matmul_tensor.h"
#include "support/tensor_cores.h"
#include "tensor_cores/coop_product.h"

namespace mn::testing {
namespace {

using codegen::CoopTile;
using codegen::CoopWgTile;

// Skips one problem of 16-bit storage where the device has none (or fails where required).
bool f16_runs(const MatmulProblem& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return true;
  const std::string missing = coop_path_missing(CoopPath::f16_storage);
  if (missing.empty()) return true;
  if (coop_path_required(CoopPath::f16_storage)) ADD_FAILURE() << p.describe() << ": " << missing;
  return false;
}

// Problems sized from a tile: ragged M, N and K, scalar and vector loads, batches, both
// operand orders, f16 storage, far-from-1 operands, epilogues.
std::vector<MatmulProblem> problems_for(int64_t bm, int64_t bn, int64_t bk, bool whole_f16) {
  std::vector<MatmulProblem> ps;
  ps.push_back({.tag = "nn_ragged_vector", .m = bm + bm / 2 + 3, .n = bn + 8, .k = 31 * bk + 8});
  ps.push_back({.tag = "tt_batch_scalar",
                .m = bm - 3,
                .n = bn + 5,
                .k = 45,
                .ta = true,
                .tb = true,
                .a_batch = 2});
  if (whole_f16) {
    // The workgroup-scope kernel reads f16 operands in place: whole tiles.
    ps.push_back(
        {.tag = "nt_f16", .m = 2 * bm, .n = bn, .k = 4 * bk, .tb = true, .dtype = DType::f16});
  } else {
    ps.push_back(
        {.tag = "nt_f16", .m = bm + 24, .n = bn + 40, .k = 264, .tb = true, .dtype = DType::f16});
  }
  ps.push_back({.tag = "tn_far_from_one",
                .m = bm + 17,
                .n = bn - 9,
                .k = 200,
                .ta = true,
                .a_scale = std::ldexp(1.0, -30),
                .b_scale = std::ldexp(1.0, 20)});
  ps.push_back({.tag = "nn_bias_relu",
                .m = 2 * bm + 5,
                .n = bn + 16,
                .k = 328,
                .epilogue = Epilogue::bias_relu});
  ps.push_back({.tag = "nt_batch_residual",
                .m = bm + 1,
                .n = bn + 3,
                .k = 96,
                .tb = true,
                .a_batch = 3,
                .b_batch = 3,
                .epilogue = Epilogue::residual});
  ps.push_back({.tag = "tn_whole_tiles", .m = 2 * bm, .n = 2 * bn, .k = 4 * bk, .ta = true});
  return ps;
}

codegen::LowerContext context(const MatmulRun& r, const codegen::DeviceTraits& t) {
  return r.node->ctx(t);
}

void check_subgroup_tiles(CoopPath path) {
  const codegen::DeviceTraits t = coop_trial_traits(path);
  const bool khr = path == CoopPath::khr;
  uint64_t seed = 1;
  for (const CoopTile& tile : codegen::coop_tiles()) {
    for (const MatmulProblem& p : problems_for(tile.bm, tile.bn, tile.bk, false)) {
      SCOPED_TRACE(std::string(tile.name) + " " + p.describe());
      if (!f16_runs(p)) continue;
      const MatmulRun r = prepare(p, seed++);
      const auto ctx = context(r, t);
      const codegen::MatmulGeometry g = codegen::geometry(ctx);
      const auto e = epilogue_for(p);
      // Two shared stages where the device's shared memory allows them, and one.
      const codegen::CoopOptions chosen = codegen::coop_options_for(tile, g, t);
      std::vector<int> stages{chosen.stages};
      if (chosen.stages == 2) stages.push_back(1);
      for (int s : stages) {
        SCOPED_TRACE("stages " + std::to_string(s));
        codegen::CoopOptions o = chosen;
        o.stages = s;
        const codegen::Lowering l = codegen::lower_matmul_coop(ctx, g, p.batch(), tile, o, e.get());
        EXPECT_EQ(l.launches.back().name, std::string("matmul_coop_") + tile.name);
        EXPECT_TRUE(fits_f16_model(run_on_device(l, r, khr), r.model));
      }
    }
  }
}

TEST(CoopMatmulGpu, SubgroupTilesThroughNvCooperativeMatrices) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  check_subgroup_tiles(CoopPath::nv);
}

TEST(CoopMatmulGpu, SubgroupTilesThroughTheKhrRewrite) {
  MN_REQUIRE_COOP_PATH(CoopPath::khr);
  check_subgroup_tiles(CoopPath::khr);
}

TEST(CoopMatmulGpu, WorkgroupScopeTiles) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  const codegen::DeviceTraits t = coop_trial_traits(CoopPath::workgroup);
  uint64_t seed = 100;
  for (const CoopWgTile& tile : codegen::coop_wg_tiles()) {
    if (!codegen::coop_wg_tile_supported(tile, t)) {
      if (coop_path_required(CoopPath::workgroup)) {
        ADD_FAILURE() << tile.name << ": the device's granularities do not divide the tile";
      }
      continue;
    }
    for (const MatmulProblem& p : problems_for(tile.bm, tile.bn, tile.bk, true)) {
      SCOPED_TRACE(std::string(tile.name) + " " + p.describe());
      if (!f16_runs(p)) continue;
      const MatmulRun r = prepare(p, seed++);
      const auto ctx = context(r, t);
      const auto e = epilogue_for(p);
      const codegen::Lowering l =
          codegen::lower_matmul_coop_wg(ctx, codegen::geometry(ctx), p.batch(), tile, e.get());
      EXPECT_EQ(l.launches.back().name, std::string("matmul_coop_") + tile.name);
      // Whole f32 tiles without epilogue take the matrix store: no tile scratch bound.
      const bool direct = p.dtype == DType::f32 && p.epilogue == Epilogue::none &&
                          p.m % tile.bm == 0 && p.n % tile.bn == 0;
      EXPECT_EQ(l.launches.back().bindings.size(), direct ? 3u : 4u + (e ? 1u : 0u));
      EXPECT_TRUE(fits_f16_model(run_on_device(l, r, true), r.model));
    }
  }
}

TEST(CoopMatmulGpu, TensorAddressedTiles) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  codegen::DeviceTraits t = coop_trial_traits(CoopPath::tensor);
  uint64_t seed = 200;
  // K whole in one workgroup, and split in up to 3 whose last adds the partials (run_lowering
  // also checks that the tile counters are left zero for the next run).
  for (const int splits : {1, 3})
    for (const codegen::TensorTile& tile : codegen::tensor_tiles()) {
      t.coop_tensor_split_k = splits;
      // Every problem in f16 and in bf16 storage (the kernel's operands), ragged too: tensor loads
      // clamp at the edges. Operands far from 1 do not fit f16 storage.
      for (MatmulProblem p : problems_for(tile.bm, tile.bn, tile.bk, false)) {
        if (p.a_scale != 1 || p.b_scale != 1) continue;
        p.dtype = p.m % 2 ? DType::bf16 : DType::f16;
        if (p.dtype == DType::bf16 && t.coop_wg_bf16_granularity[2][0] == 0) {
          std::printf("%s: no workgroup-scope bf16 matrices; in f16\n", p.describe().c_str());
          p.dtype = DType::f16;
        }
        SCOPED_TRACE(std::string(tile.name) + " " + p.describe() + " splits " +
                     std::to_string(splits));
        if (!f16_runs(p)) continue;
        const MatmulRun r = prepare(p, seed++);
        const auto ctx = context(r, t);
        const auto e = epilogue_for(p);
        const codegen::Lowering l =
            codegen::lower_matmul_tensor(ctx, codegen::geometry(ctx), p.batch(), tile, e.get());
        EXPECT_EQ(l.launches.back().name.rfind(std::string("matmul_tensor_") + tile.name, 0), 0u);
        EXPECT_EQ(l.launches.back().name.find("_split") != std::string::npos,
                  splits > 1 && p.k > tile.bk);
        EXPECT_TRUE(fits_f16_model(run_on_device(l, r, false), r.model));
      }
    }
}

// A product whose K is split gives the same bits every run: the last workgroup of a tile adds
// every split's partial in split order, whichever finished last (exact resume of training).
TEST(CoopMatmulGpu, SplitTensorProductsGiveTheSameBitsEveryRun) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  codegen::DeviceTraits t = coop_trial_traits(CoopPath::tensor);
  t.coop_tensor_split_k = 3;
  const codegen::TensorTile* tile = nullptr;
  for (const codegen::TensorTile& c : codegen::tensor_tiles()) {
    if (std::string(c.name) == "t32x32k64") tile = &c;
  }
  ASSERT_NE(tile, nullptr);
  // f16 storage, 49152 outputs of 1536-term sums: a different order of the three partials
  // changes the rounding of some of them.
  MatmulProblem p{.tag = "split", .m = 256, .n = 192, .k = 1536, .dtype = DType::f16};
  const MatmulRun r = prepare(p, 77);
  const auto ctx = context(r, t);
  const codegen::Lowering l =
      codegen::lower_matmul_tensor(ctx, codegen::geometry(ctx), 1, *tile, nullptr);
  ASSERT_NE(l.launches.back().name.find("_split3"), std::string::npos);
  const std::vector<double> first = run_on_device(l, r, false);
  EXPECT_TRUE(fits_f16_model(first, r.model));
  for (int run = 0; run < 7; ++run) EXPECT_EQ(run_on_device(l, r, false), first) << "run " << run;
}

// Mutations the bounds must catch on the device: operands staged without their power-of-two
// scale (values of 2^-30 flush to zero in f16; staged with it, they fit as packed ones do), and
// a product stored without its epilogue.
TEST(CoopMatmulGpu, TheBoundsCatchAMissingScaleAndAMissingEpilogue) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  const codegen::DeviceTraits t = coop_trial_traits(CoopPath::nv);
  const CoopTile& tile = codegen::coop_tiles()[0];
  {
    const MatmulRun r =
        prepare({.tag = "tiny", .m = 96, .n = 80, .k = 256, .a_scale = std::ldexp(1.0, -30)}, 7);
    const auto ctx = context(r, t);
    const codegen::MatmulGeometry g = codegen::geometry(ctx);
    codegen::CoopOptions o = codegen::coop_options_for(tile, g, t);
    EXPECT_TRUE(fits_f16_model(
        run_on_device(codegen::lower_matmul_coop(ctx, g, 1, tile, o, nullptr), r, false), r.model));
    o.prepack = false;  // converted while staging, scaled: as packed
    EXPECT_TRUE(fits_f16_model(
        run_on_device(codegen::lower_matmul_coop(ctx, g, 1, tile, o, nullptr), r, false), r.model));
    o.scale_staged = false;  // converted while staging, unscaled
    EXPECT_FALSE(fits_f16_model(
        run_on_device(codegen::lower_matmul_coop(ctx, g, 1, tile, o, nullptr), r, false), r.model));
  }
  {
    const MatmulRun r =
        prepare({.tag = "bias", .m = 96, .n = 80, .k = 256, .epilogue = Epilogue::bias_relu}, 8);
    const auto ctx = context(r, t);
    const codegen::MatmulGeometry g = codegen::geometry(ctx);
    const codegen::CoopOptions o = codegen::coop_options_for(tile, g, t);
    EXPECT_FALSE(fits_f16_model(
        run_on_device(codegen::lower_matmul_coop(ctx, g, 1, tile, o, nullptr), r, false), r.model));
  }
}

// The harness itself, on any device (lavapipe included): the same problems, epilogues and
// model through the scalar f32 kernel, whose results lie far inside the f16 bounds; and the
// same kernel without its epilogue, which must not. A harness bug (an operand misplaced, an
// epilogue read at the wrong index) shows here in CI, before the tensor-core tests run.
TEST(CoopHarness, ScalarKernelFitsTheModelAndAMissingEpilogueDoesNot) {
  codegen::DeviceTraits t = coop_trial_traits(CoopPath::nv);
  t.coop = false;
  uint64_t seed = 200;
  for (const MatmulProblem& p : problems_for(64, 64, 32, false)) {
    if (p.dtype == DType::f16 && !t.storage_16bit) continue;
    SCOPED_TRACE(p.describe());
    const MatmulRun r = prepare(p, seed++);
    const auto e = epilogue_for(p);
    const auto ctx = context(r, t);
    const codegen::Lowering l = codegen::lower_matmul_fused(ctx, e.get());
    EXPECT_EQ(l.launches.back().name.find("coop"), std::string::npos);
    EXPECT_TRUE(fits_f16_model(run_on_device(l, r, false), r.model));
    if (e) {
      EXPECT_FALSE(fits_f16_model(
          run_on_device(codegen::lower_matmul_fused(ctx, nullptr), r, false), r.model));
    }
  }
}

}  // namespace
}  // namespace mn::testing
