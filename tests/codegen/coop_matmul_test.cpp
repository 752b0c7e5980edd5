// The cooperative-matrix matmul on the CPU side (lavapipe has no cooperative matrices; its
// results are checked on the device by tests/tensor_cores, the GPU suite): every tile
// configuration compiles in every operand layout, dtype and staging mode (and rewrites to KHR),
// tile and stage choice by shape and device limits, and when the kernel is used at all.
#include <memory>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "codegen/glsl.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/matmul_epilogue.h"
#include "codegen/shader/shader_compiler.h"
#include "codegen/shader/spirv_coop_khr.h"

namespace mn::codegen {
namespace {

using testing::matmul_node;
using Mm = testing::OneNode;

DeviceTraits nv_traits() { return testing::h200_traits(); }

int tile_index(const char* name) {
  const auto tiles = coop_tiles();
  for (size_t i = 0; i < tiles.size(); ++i) {
    if (std::string(tiles[i].name) == name) return static_cast<int>(i);
  }
  return -1;
}

TEST(CoopMatmul, CompilesForEveryTileLayoutDtypeAndStaging) {
  const DeviceTraits t = nv_traits();
  CompileOptions co;
  for (const CoopTile& tile : coop_tiles()) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      // Aligned f32 (packed, vector loads, two stages), ragged f16 (scalar loads, one stage),
      // ragged f32 (packed, scalar loads reading the scale exponent as raw halves); aligned and
      // ragged f32 staged with their scale instead of packed.
      for (int variant = 0; variant < 5; ++variant) {
        const bool aligned = variant == 0 || variant == 3, f32 = variant != 1;
        const bool staged = variant >= 3, packed = f32 && !staged;
        SCOPED_TRACE(std::string(tile.name) + " ta=" + std::to_string(ta) +
                     " tb=" + std::to_string(tb) + " variant=" + std::to_string(variant));
        const int64_t m = aligned ? 256 : 77, n = aligned ? 512 : 133, k = aligned ? 96 : 45;
        auto mm = matmul_node(ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}, ta,
                              tb, f32 ? DType::f32 : DType::f16);
        const auto ctx = mm->ctx(t);
        const MatmulGeometry g = geometry(ctx);
        CoopOptions o;
        o.stages = aligned ? 2 : 1;
        o.prepack = !staged;
        const Lowering l = lower_matmul_coop(ctx, g, 1, tile, o, nullptr);
        // f32 operands are scaled and packed to f16 first (two launches each), or only their
        // largest magnitude is found (one launch each) when they are staged.
        ASSERT_EQ(l.launches.size(), packed ? 5u : staged ? 3u : 1u);
        const KernelLaunch& kl = l.launches.back();
        EXPECT_EQ(kl.name, std::string("matmul_coop_") + tile.name);
        EXPECT_EQ(kl.workgroup[0], static_cast<uint32_t>(tile.subgroups() * 32));
        EXPECT_EQ(kl.bindings[0].arg, packed ? ArgRef::scratch(0) : ArgRef::input(0));
        // Vector loads where the contiguous extent is a multiple of 8, scalar ones otherwise.
        EXPECT_EQ(kl.glsl.find("A_ld(") == std::string::npos, aligned);
        for (size_t p = 0; p + 1 < l.launches.size(); ++p) {
          EXPECT_NO_THROW(compile_glsl(l.launches[p].glsl, co));
        }
        const auto spirv = compile_glsl(kl.glsl, co);
        ASSERT_TRUE(uses_nv_cooperative_matrix(spirv));
        const auto khr = rewrite_nv_coop_to_khr(spirv);
        EXPECT_FALSE(uses_nv_cooperative_matrix(khr));
      }
    }
  }
}

TEST(CoopMatmul, EpilogueOperandsAndBatchesCompile) {
  const DeviceTraits t = nv_traits();
  auto mm = matmul_node({3, 200, 64}, {64, 136}, false, false);
  const auto ctx = mm->ctx(t);
  const MatmulGeometry g = geometry(ctx);
  MatmulEpilogue e;
  e.declarations = glsl::buffer(3, DType::f32, "bias", true);
  e.body = "return max(acc + bias_ld(n), 0.0);";
  e.extra = {ArgRef::input(2)};
  const Lowering l = lower_matmul_coop(ctx, g, 3, coop_tiles()[0], CoopOptions{}, &e);
  // A and B: largest magnitude, then scaled f16 copies (the exponent in 16 bytes after the
  // data); then the product.
  ASSERT_EQ(l.launches.size(), 5u);
  EXPECT_EQ(l.launches[0].name, "matmul_coop_absmax");
  EXPECT_EQ(l.launches[1].name, "matmul_coop_pack");
  ASSERT_EQ(l.scratch_bytes.size(), 4u);
  EXPECT_EQ(l.scratch_bytes[0], 3u * 200 * 64 * 2 + 16);
  EXPECT_EQ(l.scratch_bytes[2], 64u * 136 * 2 + 16);
  for (size_t p = 0; p + 1 < l.launches.size(); ++p) {
    EXPECT_NO_THROW(compile_glsl(l.launches[p].glsl, CompileOptions{}));
  }
  const KernelLaunch& k = l.launches.back();
  ASSERT_EQ(k.bindings.size(), 4u);
  EXPECT_EQ(k.bindings[0].arg, ArgRef::scratch(0));
  EXPECT_EQ(k.bindings[1].arg, ArgRef::scratch(2));
  EXPECT_NE(k.glsl.find("* sa * sb"), std::string::npos);
  EXPECT_EQ(k.bindings[3].arg, ArgRef::input(2));
  EXPECT_NE(k.glsl.find("mm_epilogue(Cs["), std::string::npos);
  EXPECT_NO_THROW(compile_glsl(k.glsl, CompileOptions{}));
  // 3 batches × 4 row tiles × 3 column tiles of 64×64.
  EXPECT_EQ(k.groups[0] * k.groups[1], 36u);
  // Staged instead of packed: a magnitude launch per f32 operand, whose partial maxima the
  // product binds after the epilogue's operands and reduces into the loaders' scale; unscaled,
  // the product alone.
  CoopOptions unpacked;
  unpacked.prepack = false;
  const Lowering staged = lower_matmul_coop(ctx, g, 3, coop_tiles()[0], unpacked, &e);
  ASSERT_EQ(staged.launches.size(), 3u);
  EXPECT_EQ(staged.launches[0].name, "matmul_coop_absmax");
  const KernelLaunch& sk = staged.launches.back();
  ASSERT_EQ(sk.bindings.size(), 6u);
  EXPECT_EQ(sk.bindings[0].arg, ArgRef::input(0));
  EXPECT_EQ(sk.bindings[4].arg, ArgRef::scratch(0));
  EXPECT_EQ(sk.bindings[5].arg, ArgRef::scratch(1));
  EXPECT_NE(sk.glsl.find("sA = exp2(float(ea))"), std::string::npos);
  EXPECT_NE(sk.glsl.find("exp2(-float(ea))"), std::string::npos);
  EXPECT_NO_THROW(compile_glsl(sk.glsl, CompileOptions{}));
  unpacked.scale_staged = false;
  EXPECT_EQ(lower_matmul_coop(ctx, g, 3, coop_tiles()[0], unpacked, &e).launches.size(), 1u);
}

TEST(CoopMatmul, TileChoiceFollowsShapeAndDevice) {
  DeviceTraits t = nv_traits();
  auto pick = [&](int64_t m, int64_t k, int64_t n) {
    auto mm = matmul_node({m, k}, {k, n}, false, false);
    const auto idx = choose_coop_tile(geometry(mm->ctx(t)), 1, t);
    return idx ? std::string(coop_tiles()[static_cast<size_t>(*idx)].name) : std::string("none");
  };
  EXPECT_EQ(pick(8192, 8192, 8192), "l");  // 32 × 64 = 2048 groups of 128×256
  EXPECT_EQ(pick(2048, 1024, 2048), "m");  // 128 groups of 128×256 < 132; 256 of 128×128
  EXPECT_EQ(pick(256, 576, 1536), "s");    // even 64×64 gives only 96 groups: the smallest
  t.coop_tiles = 0b011;                    // "l" failed its self-test
  EXPECT_EQ(pick(8192, 8192, 8192), "m");
  t.coop_tiles = ~0u;
  t.max_shared_bytes = 16384;  // only the 64×64 tile's staging fits
  EXPECT_EQ(pick(8192, 8192, 8192), "s");
  t.max_workgroup_invocations = 64;
  EXPECT_EQ(pick(8192, 8192, 8192), "none");
}

TEST(CoopMatmul, TwoStagesWhereSharedMemoryAllows) {
  DeviceTraits t = nv_traits();
  auto mm = matmul_node({8192, 8192}, {8192, 8192}, false, false);
  const MatmulGeometry g = geometry(mm->ctx(t));
  const CoopTile& l = coop_tiles()[static_cast<size_t>(tile_index("l"))];
  const CoopTile& m = coop_tiles()[static_cast<size_t>(tile_index("m"))];
  EXPECT_EQ(coop_options_for(m, g, t).stages, 2);
  EXPECT_EQ(coop_options_for(l, g, t).stages, 1);  // 61 KB for two stages > 48 KB
  t.max_shared_optin_bytes = 232448;               // the opt-in maximum admits it
  EXPECT_EQ(coop_options_for(l, g, t).stages, 2);
  CoopOptions two;
  two.stages = 2;
  EXPECT_LE(coop_shared_bytes(l, g, two), t.max_shared_optin_bytes);
  EXPECT_GT(coop_shared_bytes(l, g, two), 49152u);
}

TEST(CoopMatmul, UsedOnlyWhenEnabledAndWorthwhile) {
  DeviceTraits t = nv_traits();
  const LowerFn* fn = find_lowering("matmul");
  ASSERT_NE(fn, nullptr);
  auto big = matmul_node({1024, 512}, {512, 1024}, false, false);
  auto one_tile = matmul_node({64, 4096}, {4096, 64}, false, false);  // M·N below 2^16
  // 256 groups of 64×64 fill 132 multiprocessors; 64 of 128×128 would not.
  EXPECT_EQ((*fn)(big->ctx(t)).launches.back().name, "matmul_coop_s");
  EXPECT_EQ(coop_rejection(big->ctx(t), geometry(big->ctx(t)), 1), "");

  auto reason = [&](const Mm& mm, const DeviceTraits& d) {
    return coop_rejection(mm.ctx(d), geometry(mm.ctx(d)), 1);
  };
  DeviceTraits off = t;
  off.coop = false;
  EXPECT_NE(reason(*big, off), "");
  EXPECT_EQ((*fn)(big->ctx(off)).launches.back().name, "matmul_64x64");
  DeviceTraits wide = t;
  wide.subgroup_size = 64;
  EXPECT_NE(reason(*big, wide), "");
  auto bf16 = matmul_node({1024, 512}, {512, 1024}, false, false, DType::bf16);
  EXPECT_NE(reason(*bf16, t), "");
  EXPECT_NE(reason(*one_tile, t), "");
  auto tiny = matmul_node({32, 32}, {32, 32}, false, false);  // below the threshold
  EXPECT_NE(reason(*tiny, t), "");
  EXPECT_EQ((*fn)(tiny->ctx(t)).launches[0].name, "matmul_16x16");
  auto thin = matmul_node({16, 1024}, {1024, 1024}, false, false);  // M below 32
  EXPECT_NE(reason(*thin, t), "");
  // Short K on a medium output stays scalar (measured slower on tensor cores); the same
  // product with the long K, or with a large output, does not.
  auto short_k = matmul_node({256, 576}, {576, 1536}, false, false);
  EXPECT_EQ(reason(*short_k, t), "short K on a medium output");
  auto long_k = matmul_node({256, 1536}, {1536, 576}, false, false);
  EXPECT_EQ(reason(*long_k, t), "");
  auto head = matmul_node({256, 576}, {576, 49152}, false, false);
  EXPECT_EQ(reason(*head, t), "");
  // The output counts over the batch: 8 sequences of 512 rows by one 576 × 576 weight are one
  // product of 4096 rows (2.4M outputs), on tensor cores; one sequence of 256 is not.
  auto batched = matmul_node({8, 512, 576}, {576, 576}, false, false);
  EXPECT_EQ(coop_rejection(batched->ctx(t), geometry(batched->ctx(t)), 8), "");
  EXPECT_NE((*fn)(batched->ctx(t)).launches.back().name.find("matmul_coop"), std::string::npos);
  auto one = matmul_node({1, 256, 576}, {576, 576}, false, false);
  EXPECT_EQ(coop_rejection(one->ctx(t), geometry(one->ctx(t)), 1), "short K on a medium output");
  // So does the size threshold: 8 chunks of 50 rows by a 2048 × 720 weight are 288000 outputs,
  // one chunk's 36000 is below it, and so are 8 heads' own 50 × 720 products.
  auto chunks = matmul_node({8, 50, 2048}, {2048, 720}, false, false);
  EXPECT_EQ(coop_rejection(chunks->ctx(t), geometry(chunks->ctx(t)), 8), "");
  auto chunk = matmul_node({1, 50, 2048}, {2048, 720}, false, false);
  EXPECT_EQ(coop_rejection(chunk->ctx(t), geometry(chunk->ctx(t)), 1), "below the size threshold");
  auto heads = matmul_node({8, 50, 2048}, {8, 2048, 720}, false, false);
  EXPECT_EQ(coop_rejection(heads->ctx(t), geometry(heads->ctx(t)), 8), "below the size threshold");
}

}  // namespace
}  // namespace mn::codegen
