// The tensor-addressed matmul and the current shader toolchain on the CPU side (lavapipe has no
// cooperative matrices; results are checked on the device by tests/tensor_cores): every tile
// in every operand layout, dtype, ragged shape and store compiles with the current glslang,
// passes spirv-val 2025.5 and uses tensor loads; the kernel is chosen only where the device
// offers tensor addressing; templates refuse unfilled and unknown fields; the current
// compiler reports errors with the source's own line numbers.
#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "codegen/current_toolchain.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/lower_matmul_tensor.h"
#include "codegen/matmul_epilogue.h"
#include "support/expect_error.h"

namespace mn::codegen {
namespace {

using testing::compile_current;

using testing::matmul_node;

// The H200 with tensor addressing and its bf16·bf16+f32 workgroup-scope matrices (the same
// granularities as f16's).
DeviceTraits tensor_traits() {
  DeviceTraits t = testing::h200_wg_traits();
  t.coop_tensor = true;
  t.coop_wg_bf16_granularity = t.coop_wg_granularity;
  return t;
}

// The kernel's SPIR-V from the current compiler, or empty when the toolchain is missing.
std::vector<uint32_t> compile_or_skip(const KernelLaunch& k) {
  if (!current_glslang().available || test::spirv_val_path().empty()) return {};
  return compile_current(k.glsl, k.name);
}

TEST(TensorMatmul, EveryTileLayoutAndStoreCompilesAndValidates) {
  REQUIRE_CURRENT_TOOLCHAIN();
  DeviceTraits t = tensor_traits();
  for (const TensorTile& tile : tensor_tiles()) {
    for (int layout = 0; layout < 4; ++layout) {
      for (DType dt : {DType::f16, DType::bf16}) {
        for (bool ragged : {false, true}) {
          const bool ta = layout & 1, tb = layout & 2;
          // K split in 3 (whole: 8 K steps in 3, 3, 2) or 2 (ragged: 4 steps in 2, 2) for half
          // the layouts, whole for the others.
          t.coop_tensor_split_k = layout % 2 ? 1 : 3;
          const int64_t m = ragged ? 300 : 512, n = ragged ? 520 : 512, k = ragged ? 100 : 256;
          // 3 splits asked of K's steps, none left empty: 8 steps of 32 in 3, 3, 2; 4 of 64 in
          // 2, 2; ragged, 4 steps of 32 in 2, 2 and 2 of 64 in 1, 1.
          const int64_t steps = (k + tile.bk - 1) / tile.bk;
          const int64_t per =
              (steps + std::min<int64_t>(3, steps) - 1) / std::min<int64_t>(3, steps);
          const int splits = layout % 2 ? 1 : static_cast<int>((steps + per - 1) / per);
          const std::string what = std::string(tile.name) + " ta=" + std::to_string(ta) +
                                   " tb=" + std::to_string(tb) + " " +
                                   std::string(dtype_name(dt)) + (ragged ? " ragged" : "") +
                                   " splits " + std::to_string(splits);
          SCOPED_TRACE(what);
          auto mm = matmul_node(ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}, ta,
                                tb, dt);
          const auto ctx = mm->ctx(t);
          const Lowering l = lower_matmul_tensor(ctx, geometry(ctx), 1, tile, nullptr);
          ASSERT_EQ(l.launches.size(), 1u);  // 16-bit operands are read in place
          const KernelLaunch& kl = l.launches.back();
          EXPECT_TRUE(kl.current_compiler);
          EXPECT_FALSE(kl.coop_khr);
          EXPECT_EQ(kl.workgroup[0], tile.invocations);
          const int64_t tiles = ((m + tile.bm - 1) / tile.bm) * ((n + tile.bn - 1) / tile.bn);
          EXPECT_EQ(kl.groups[0] * kl.groups[1], static_cast<uint32_t>(tiles * splits));
          EXPECT_EQ(kl.name.ends_with("_split" + std::to_string(splits)), splits > 1) << kl.name;
          EXPECT_EQ(kl.bindings.size(), splits > 1 ? 5u : 3u);
          EXPECT_EQ(l.scratch_bytes.size(), splits > 1 ? 1u : 0u);
          if (splits > 1) {
            EXPECT_EQ(l.scratch_bytes[0], static_cast<uint64_t>(splits * m * n * 4));
            EXPECT_EQ(l.counter_bytes.at(0), static_cast<uint64_t>(tiles * 4));
          }
          const auto spirv = compile_current(kl.glsl, kl.name);
          EXPECT_EQ(test::spirv_val_errors(spirv), "");
          const std::string dis = test::spirv_dis(spirv);
          EXPECT_NE(dis.find("OpCooperativeMatrixLoadTensorNV"), std::string::npos);
          // Without epilogue the matrix store writes C, with nothing per element but the
          // rounding of a bf16 result (the driver's conversion truncates).
          EXPECT_NE(dis.find("OpCooperativeMatrixStoreTensorNV"), std::string::npos);
          EXPECT_EQ(dis.find("OpCooperativeMatrixPerElementOpNV") != std::string::npos,
                    dt == DType::bf16);
          EXPECT_EQ(dis.find("OpAtomicIAdd") != std::string::npos, splits > 1);
        }
      }
    }
  }
}

// Products stored reshaped and permuted (LowerContext::stored_shape/stored_perm,
// schedule/permuted_stores.h): attention's output gradient [1, 256, 576] split into 9 heads of
// 64 as [1, 9, 256, 64], and a value gradient [1, 3, 256, 64] merged back as [1, 256, 3, 64]
// (K split in 3). Tiles whose columns stay within a head store each tile through the head's
// row stride (64 and 192) and compile to valid SPIR-V; wider ones, a permutation moving the
// last axis and one splitting the rows are refused.
TEST(TensorMatmul, PermutedStoresCompileAndValidate) {
  REQUIRE_CURRENT_TOOLCHAIN();
  DeviceTraits t = tensor_traits();
  struct Case {
    const char* what;
    Shape a, b, stored;
    std::vector<int64_t> perm;
    int64_t stride;
    int splits;
  };
  const std::vector<Case> cases{
      {"heads split", {1, 256, 576}, {576, 576}, {1, 256, 9, 64}, {0, 2, 1, 3}, 64, 1},
      {"heads merged", {1, 3, 256, 768}, {1, 3, 768, 64}, {1, 3, 256, 64}, {0, 2, 1, 3}, 192, 3},
  };
  for (const Case& c : cases) {
    for (const TensorTile& tile : tensor_tiles()) {
      SCOPED_TRACE(std::string(c.what) + " " + tile.name);
      auto mm = matmul_node(c.a, c.b, false, false, DType::bf16);
      t.coop_tensor_tile = tile.name;
      t.coop_tensor_split_k = c.splits;
      LowerContext ctx = mm->ctx(t);
      ctx.stored_shape = &c.stored;
      ctx.stored_perm = &c.perm;
      const std::optional<int64_t> stride = tensor_permuted_row_stride(ctx);
      if (c.stored.back() % tile.bn != 0) {
        EXPECT_FALSE(stride.has_value());
        continue;
      }
      ASSERT_EQ(stride, c.stride);
      const Lowering l =
          lower_matmul_tensor(ctx, geometry(ctx), numel(geometry(ctx).out_batch), tile, nullptr);
      const KernelLaunch& kl = l.launches.back();
      EXPECT_NE(kl.name.find("+store[permute(0,2,1,3)]"), std::string::npos) << kl.name;
      const auto spirv = compile_current(kl.glsl, kl.name);
      EXPECT_EQ(test::spirv_val_errors(spirv), "");
    }
  }
  t.coop_tensor_tile.clear();
  t.coop_tensor_split_k = 0;
  auto mm = matmul_node({1, 256, 576}, {576, 576}, false, false, DType::bf16);
  LowerContext ctx = mm->ctx(t);
  const Shape heads{1, 256, 9, 64}, rows_split{1, 16, 16, 576};
  const std::vector<int64_t> last_moved{0, 3, 1, 2}, rows_perm{0, 2, 1, 3};
  ctx.stored_shape = &heads;
  ctx.stored_perm = &last_moved;
  EXPECT_FALSE(tensor_permuted_row_stride(ctx).has_value()) << "the last axis moved";
  ctx.stored_shape = &rows_split;
  ctx.stored_perm = &rows_perm;
  EXPECT_FALSE(tensor_permuted_row_stride(ctx).has_value()) << "the rows split";
  mn::expect_error<Error>([&] { lower_matmul_fused(ctx, nullptr); }, {"permuted"});
}

// A sibling product (GemvExtras::sibling_input): its matrix bound after the epilogue's operands,
// its accumulator read by the epilogue as mm_sibling, rounded where the sibling product is 16-bit
// and as it is where it is f32; valid SPIR-V either way, never split. Refused with a tile of
// more than 32 accumulator floats per invocation, and with a norm.
TEST(TensorMatmul, SiblingProductsCompileAndValidate) {
  REQUIRE_CURRENT_TOOLCHAIN();
  DeviceTraits t = tensor_traits();
  t.tensor_sibling = true;
  t.coop_tensor_split_k = 3;
  auto mm = matmul_node({512, 576}, {1536, 576}, false, true, DType::bf16);
  const auto ctx = mm->ctx(t);
  MatmulEpilogue e;
  e.body = "return acc * mm_sibling;";
  const TensorTile* tile = nullptr;
  for (const TensorTile& c : tensor_tiles()) {
    if (std::string(c.name) == "t32x64k64") tile = &c;
  }
  ASSERT_NE(tile, nullptr);
  for (const DType product : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(product));
    GemvExtras x;
    x.sibling_input = 2;
    x.sibling_dtype = DType::bf16;
    x.sibling_product_dtype = product;
    EXPECT_TRUE(tensor_takes_extras(ctx, x));
    const Lowering l = lower_matmul_tensor(ctx, geometry(ctx), 1, *tile, &e, &x);
    const KernelLaunch& kl = l.launches.back();
    EXPECT_EQ(kl.name, "matmul_tensor_t32x64k64+sibling");
    ASSERT_EQ(kl.bindings.size(), 4u);
    EXPECT_EQ(kl.bindings[3].arg, ArgRef::input(2));
    EXPECT_EQ(kl.glsl.find("mn_f32_to_bf16(v)") != std::string::npos, product == DType::bf16);
    const auto spirv = compile_current(kl.glsl, kl.name);
    EXPECT_EQ(test::spirv_val_errors(spirv), "");
  }
  GemvExtras x;
  x.sibling_input = 2;
  x.sibling_dtype = DType::bf16;
  for (const TensorTile& c : tensor_tiles()) {
    if (!tensor_tile_takes_sibling(c, t)) {
      mn::expect_error<Error>([&] { lower_matmul_tensor(ctx, geometry(ctx), 1, c, &e, &x); },
                              {"two accumulators"});
    }
  }
  x.norm = true;
  EXPECT_FALSE(tensor_takes_extras(ctx, x));
  mn::expect_error<Error>([&] { lower_matmul_tensor(ctx, geometry(ctx), 1, *tile, &e, &x); },
                          {"no norm"});
}

TEST(TensorMatmul, EpilogueAndBatchesCompileAndValidate) {
  REQUIRE_CURRENT_TOOLCHAIN();
  // A device of 8 multiprocessors: on the H200's 132 the product's 10 tiles would not fill it
  // and no f16 tile would be chosen (the subgroup-scope kernel takes such products).
  DeviceTraits t = tensor_traits();
  t.multiprocessors = 8;
  // A batch of 3 against a broadcast B, with a bias-and-activation epilogue.
  auto mm = matmul_node({3, 200, 96}, {96, 136}, false, false, DType::f16);
  const auto ctx = mm->ctx(t);
  MatmulEpilogue relu;
  relu.body = "return max(acc, 0.0);";
  const MatmulEpilogue e = with_row_bias(&relu, DType::f32, 2);
  const std::optional<int> chosen = choose_tensor_tile(ctx, geometry(ctx), 3);
  ASSERT_TRUE(chosen.has_value());
  const TensorTile& tile = tensor_tiles()[static_cast<size_t>(*chosen)];
  const Lowering l = lower_matmul_tensor(ctx, geometry(ctx), 3, tile, &e);
  const KernelLaunch& kl = l.launches.back();
  EXPECT_EQ(kl.bindings.size(), 3u + e.extra.size());
  const auto spirv = compile_current(kl.glsl, kl.name);
  EXPECT_EQ(test::spirv_val_errors(spirv), "");
  const std::string dis = test::spirv_dis(spirv);
  EXPECT_NE(dis.find("OpCooperativeMatrixPerElementOpNV"), std::string::npos);
  EXPECT_NE(dis.find("OpCooperativeMatrixStoreTensorNV"), std::string::npos);
  // K split: the partials and counters bind after the epilogue's operands.
  DeviceTraits split = t;
  split.coop_tensor_split_k = 2;
  const auto sctx = mm->ctx(split);
  const Lowering sl = lower_matmul_tensor(sctx, geometry(sctx), 3, tile, &e);
  const KernelLaunch& sk = sl.launches.back();
  ASSERT_EQ(sk.bindings.size(), 5u + e.extra.size());
  EXPECT_EQ(sk.bindings[3 + e.extra.size()].arg.kind, ArgRef::Kind::scratch);
  EXPECT_EQ(sk.bindings[4 + e.extra.size()].arg.kind, ArgRef::Kind::counters);
  EXPECT_EQ(test::spirv_val_errors(compile_current(sk.glsl, sk.name)), "");
}

TEST(TensorMatmul, SmallGridsSplitK) {
  const DeviceTraits t = tensor_traits();  // 132 multiprocessors
  // With the 64×64 tile, 256×576 is 36 workgroups; 4 splits of K = 576 (18 steps) fill the
  // device.
  DeviceTraits t64 = t;
  t64.coop_tensor_tile = "t64x64k32";
  auto qo = matmul_node({256, 576}, {576, 576}, false, false, DType::bf16);
  EXPECT_EQ(qo->lower(t64).launches.back().name, "matmul_tensor_t64x64k32_split4");
  // K = 256 (8 steps): at most 2 splits of 4 steps.
  auto dw = matmul_node({256, 256}, {256, 576}, false, false, DType::bf16);
  EXPECT_EQ(dw->lower(t64).launches.back().name, "matmul_tensor_t64x64k32_split2");
  // Chosen freely, the smaller tiles fill the device instead (144 workgroups of 32×32), with K
  // steps of 64 where they divide K.
  EXPECT_EQ(qo->lower(t).launches.back().name, "matmul_tensor_t32x32k64");
  EXPECT_EQ(dw->lower(t).launches.back().name, "matmul_tensor_t32x32k64");
  // A grid that fills the device is not split, and takes the largest tile that fills it
  // (576×576: 162 workgroups of 32×64, 81 of 64×64); neither is a short K.
  auto wide = matmul_node({576, 256}, {256, 576}, false, false, DType::bf16);
  EXPECT_EQ(wide->lower(t).launches.back().name, "matmul_tensor_t32x64k64");
  // K = 96 takes steps of 32: 64 does not divide it.
  auto short_k = matmul_node({256, 96}, {96, 1024}, false, false, DType::bf16);
  EXPECT_EQ(short_k->lower(t).launches.back().name, "matmul_tensor_t32x32k32");
  // Attention's products per head (256×256×64, 9 heads): small one by one, not as a batch.
  auto scores = matmul_node({9, 256, 64}, {9, 256, 64}, false, true, DType::bf16);
  EXPECT_EQ(scores->lower(t).launches.back().name.rfind("matmul_tensor_t", 0), 0u)
      << scores->lower(t).launches.back().name;
  // Few outputs over a long K: the key/value projections (256 × 192, K = 576): 48 workgroups
  // of 32×32, 2 splits of the 9 steps of 64 (each split at least 4 steps long).
  auto kv = matmul_node({256, 576}, {192, 576}, false, true, DType::bf16);
  EXPECT_EQ(kv->lower(t).launches.back().name, "matmul_tensor_t32x32k64_split2");
  // Never, when told so.
  DeviceTraits never = t;
  never.coop_tensor_split_k = 1;
  EXPECT_EQ(kv->lower(never).launches.back().name, "matmul_tensor_t32x32k64");
  // With coop_tensor_long_split, a grid that fills the device over a long K: the down
  // projection's input gradient (256 × 576, K = 1536: 144 workgroups, 24 steps of 64) in 3
  // splits of 8 steps (within 4 fills), the LM head's (K = 49152) in 3 too; K = 576 (9 steps)
  // stays whole, and without the switch so does K = 1536.
  DeviceTraits long_split = t;
  long_split.coop_tensor_long_split = true;
  auto down = matmul_node({256, 1536}, {1536, 576}, false, false, DType::bf16);
  EXPECT_EQ(down->lower(long_split).launches.back().name, "matmul_tensor_t32x32k64_split3");
  EXPECT_EQ(down->lower(t).launches.back().name, "matmul_tensor_t32x32k64");
  auto head = matmul_node({256, 49152}, {49152, 576}, false, false, DType::bf16);
  EXPECT_EQ(head->lower(long_split).launches.back().name, "matmul_tensor_t32x32k64_split3");
  EXPECT_EQ(qo->lower(long_split).launches.back().name, "matmul_tensor_t32x32k64");
  // Four fills or more: whole.
  auto big = matmul_node({8192, 1536}, {1536, 4096}, false, false, DType::bf16);
  EXPECT_EQ(big->lower(long_split).launches.back().name.find("_split"), std::string::npos)
      << big->lower(long_split).launches.back().name;
  // Tiles larger than 32 × 64 stay whole: the 8 × 512 step's down projection input gradient
  // (4096 × 576, K = 1536: 160 workgroups of 128 × 128, 48 steps) ...
  auto step_down = matmul_node({4096, 1536}, {1536, 576}, false, false, DType::bf16);
  EXPECT_EQ(step_down->lower(long_split).launches.back().name, "matmul_tensor_t128x128k32");
  // ... while its weight gradients on small tiles split (576 × 576 over K = 4096: 162
  // workgroups of 32 × 64, 64 steps, 3 splits within 4 fills).
  auto step_dw = matmul_node({576, 4096}, {4096, 576}, false, false, DType::bf16);
  EXPECT_EQ(step_dw->lower(long_split).launches.back().name, "matmul_tensor_t32x64k64_split3");
  EXPECT_EQ(step_dw->lower(t).launches.back().name, "matmul_tensor_t32x64k64");
  // 64 × 64 tiles stay whole: the gate's weight gradient (1536 × 576 over K = 4096, 216
  // workgroups) measured slower split in two.
  auto gate_dw = matmul_node({1536, 4096}, {4096, 576}, false, false, DType::bf16);
  EXPECT_EQ(gate_dw->lower(long_split).launches.back().name, "matmul_tensor_t64x64k64");
}

TEST(TensorMatmul, ChosenOnlyWithTensorAddressingForF16Operands) {
  auto mm = matmul_node({4096, 4096}, {4096, 4096}, false, false, DType::f16);
  DeviceTraits t = testing::h200_wg_traits();
  {
    const auto ctx = mm->ctx(t);
    EXPECT_NE(tensor_matmul_rejection(ctx, geometry(ctx), 1), "");
    EXPECT_TRUE(coop_wg_rejection(ctx, geometry(ctx), 1).empty());
  }
  t.coop_tensor = true;
  const auto ctx = mm->ctx(t);
  EXPECT_EQ(tensor_matmul_rejection(ctx, geometry(ctx), 1), "");
  const Lowering l = mm->lower(t);
  EXPECT_EQ(l.launches.back().name.rfind("matmul_tensor_", 0), 0u) << l.launches.back().name;
  // A forced tile is taken wherever it fits.
  t.coop_tensor_tile = "t128x128k32";
  EXPECT_EQ(mm->lower(t).launches.back().name, "matmul_tensor_t128x128k32");
  // f32 operands stay on the workgroup-scope kernel (measured faster through their packing).
  auto f32 = matmul_node({4096, 4096}, {4096, 4096}, false, false);
  const auto fctx = f32->ctx(t);
  EXPECT_NE(tensor_matmul_rejection(fctx, geometry(fctx), 1), "");
  EXPECT_EQ(f32->lower(t).launches.back().name.rfind("matmul_coop_w", 0), 0u);
}

TEST(TensorMatmul, Bf16ProductsNeedBf16MatricesAndTakeSmallTiles) {
  // 512×1024: no large tile fills the device; bf16 has no other tensor-core kernel and takes
  // the largest of the small tiles that does (256 workgroups of 32×64), in K steps of 64.
  auto mm = matmul_node({512, 576}, {1024, 576}, false, true, DType::bf16);
  DeviceTraits t = tensor_traits();
  const auto ctx = mm->ctx(t);
  EXPECT_EQ(tensor_matmul_rejection(ctx, geometry(ctx), 1), "");
  EXPECT_EQ(mm->lower(t).launches.back().name, "matmul_tensor_t32x64k64");
  const auto spirv = compile_or_skip(mm->lower(t).launches.back());
  if (!spirv.empty()) EXPECT_EQ(test::spirv_val_errors(spirv), "");
  // Without bf16 matrices, the scalar kernel.
  t.coop_wg_bf16_granularity = {};
  const auto ctx2 = mm->ctx(t);
  EXPECT_NE(tensor_matmul_rejection(ctx2, geometry(ctx2), 1), "");
  EXPECT_EQ(mm->lower(t).launches.back().name.find("tensor"), std::string::npos);
  // Tiny products stay on the scalar kernel.
  auto tiny = matmul_node({64, 64}, {64, 64}, false, false, DType::bf16);
  const DeviceTraits with_bf16 = tensor_traits();  // the context refers to it
  const auto tctx = tiny->ctx(with_bf16);
  EXPECT_NE(tensor_matmul_rejection(tctx, geometry(tctx), 1), "");
}

TEST(TensorMatmul, TilesAreChosenToFillTheDevice) {
  DeviceTraits t = tensor_traits();
  // 8192²: every tile fills 132 multiprocessors; the largest is taken.
  auto big = matmul_node({8192, 8192}, {8192, 8192}, false, false, DType::f16);
  const auto bctx = big->ctx(t);
  const TensorTile& bt = tensor_tiles()[*choose_tensor_tile(bctx, geometry(bctx), 1)];
  EXPECT_EQ(bt.bm * bt.bn, 128 * 256);
  // 2048²: 256 workgroups of 128×128 fill the device, 128 of the larger do not.
  auto mid = matmul_node({2048, 256}, {256, 2048}, false, false, DType::f16);
  const auto mctx = mid->ctx(t);
  const TensorTile& mt = tensor_tiles()[*choose_tensor_tile(mctx, geometry(mctx), 1)];
  EXPECT_EQ(mt.bm * mt.bn, 128 * 128);
  // 1024²: 256 tiles of 64×64 would fill the device, but f16 products this small run faster on
  // the subgroup-scope kernel (the 64×64 tile is for bf16).
  auto k1 = matmul_node({1024, 1024}, {1024, 1024}, false, false, DType::f16);
  const auto k1ctx = k1->ctx(t);
  EXPECT_FALSE(choose_tensor_tile(k1ctx, geometry(k1ctx), 1).has_value());
  // 512×1024: no tile fills the device; the subgroup-scope kernel takes it.
  auto small = matmul_node({512, 1024}, {1024, 1024}, false, false, DType::f16);
  const auto sctx = small->ctx(t);
  EXPECT_FALSE(choose_tensor_tile(sctx, geometry(sctx), 1).has_value());
  EXPECT_NE(tensor_matmul_rejection(sctx, geometry(sctx), 1), "");
  EXPECT_EQ(small->lower(t).launches.back().name.rfind("matmul_coop_", 0), 0u);
}

TEST(KernelTemplate, RefusesUnfilledAndUnknownFields) {
  EXPECT_THROW(fill_kernel_template("no_such_kernel.comp", {}), Error);
  try {
    fill_kernel_template("matmul_tensor.comp", {{"TA", "0"}});
    ADD_FAILURE() << "a half-filled template was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not filled"), std::string::npos) << e.what();
  }
  auto mm = matmul_node({256, 256}, {256, 256}, false, false, DType::f16);
  const DeviceTraits t = tensor_traits();
  const auto ctx = mm->ctx(t);
  EXPECT_NO_THROW(lower_matmul_tensor(ctx, geometry(ctx), 1, tensor_tiles()[0], nullptr));
  EXPECT_EQ(kernel_templates().count("matmul_tensor.comp"), 1u);
}

TEST(CurrentGlslang, ReportsErrorsAtTheSourceLines) {
  REQUIRE_CURRENT_TOOLCHAIN();
  const std::string source =
      "#version 450\n"
      "layout(local_size_x = 1) in;\n"
      "layout(std430, binding = 0) buffer B { float x[]; };\n"
      "void main() {\n"
      "  x[0] = SCALE * undeclared_name;\n"
      "}\n";
  CompileOptions co;
  co.compiler = GlslCompiler::current;
  co.name = "broken";
  co.macros = {{"SCALE", "2.0"}};
  try {
    compile_glsl(source, co);
    ADD_FAILURE() << "an undeclared identifier compiled";
  } catch (const ShaderCompileError& e) {
    EXPECT_EQ(e.lines(), std::vector<int>{5}) << e.what();
    EXPECT_NE(std::string(e.what()).find("undeclared_name"), std::string::npos) << e.what();
  }
  // The same source with the name declared compiles, and its macro was applied.
  const std::string fixed = "#version 450\n#define undeclared_name 1.0\n" + source.substr(13);
  EXPECT_NO_THROW(compile_glsl(fixed, co));
}

TEST(CurrentGlslang, CacheKeysNameTheCompiler) {
  if (!current_glslang().available) GTEST_SKIP() << current_glslang().status;
  EXPECT_NE(compiler_version(GlslCompiler::current), compiler_version(GlslCompiler::linked));
  EXPECT_NE(compiler_version(GlslCompiler::current).find("slang-glslang-"), std::string::npos);
}

}  // namespace
}  // namespace mn::codegen
