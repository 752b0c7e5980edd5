// Kernels storing their result in the layout of the permute that alone reads it
// (schedule/permuted_stores.h): attention's output with its heads merged, a softmax, a GQA-style
// sum over groups read through a reshape; the values are the unfused kernels' bit for bit and
// the reference's, with no permute launch (a plain reduction too); a result read elsewhere too
// stores the permute's value as a second output (a permuted twin), narrowed where the permute
// narrows; one read through a reshape by its permute keeps the permute. Products store theirs
// through their tiles (tensor-addressed) or element by element (every other kernel).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/coop_fixture.h"
#include "plan/step_plan.h"
#include "schedule/fused_and_unfused.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

TEST(PermutedStoresGpu, ResultsStoredInTheirPermutesLayout) {
  Graph g;
  reference::Feeds feeds;
  testing::RandomInputs input{g, feeds, testing::rng_for("permuted-stores")};
  Tensor q = input("q", {2, 4, 16, 8});  // [B, H, L, D]
  Tensor k = input("k", {2, 2, 16, 8});
  Tensor v = input("v", {2, 2, 16, 8});
  Tensor s = input("s", {2, 3, 5, 7});
  Tensor r = input("r", {2, 2, 3, 16, 8});  // [B, Hkv, group, L, D]
  // Heads merged back into [B, L, H * D].
  Tensor o = scaled_dot_product_attention(q, k, v, {}, true);
  g.output("merged", reshape(permute(o, {0, 2, 1, 3}), {2, 16, 32}) * 2.0);
  // Narrowed to bf16 by the permute's copy, so by the attention's permuted store.
  Tensor o2 = scaled_dot_product_attention(q * 0.5, k, v);
  g.output("merged_bf16", cast(permute(cast(o2, DType::bf16), {0, 2, 1, 3}), DType::f32) + 1.0);
  g.output("softmax_t", permute(softmax(s * 0.5), {3, 1, 0, 2}) + 1.0);
  // A sum over the group axis, its kept 1 dropped by a reshape, then the heads merged.
  Tensor summed = reshape(sum(r * r, {2}, true), {2, 2, 16, 8});
  g.output("groups", permute(summed, {0, 2, 1, 3}) * 3.0);
  // The same sum with no prologue: a reduction kernel of its own.
  Tensor plain = reshape(sum(r, {2}, true), {2, 2, 16, 8});
  g.output("plain_groups", permute(plain, {0, 2, 1, 3}) + 1.0);
  // Read twice: stored as it is and permuted (a twin).
  Tensor twice = softmax(q * 3.0);
  g.output("twice_permuted", permute(twice, {0, 2, 1, 3}) + 0.0);
  g.output("twice", twice * 1.5);
  // Attention's output read by a reduction and by its heads merged, narrowed to bf16: as in a
  // training step, the backward's reader and the output projection's.
  Tensor o3 = scaled_dot_product_attention(q, k * 0.5, v, {}, true);
  g.output("o3_sum", sum(o3 * o3, {3}, true));
  g.output("o3_merged", cast(permute(cast(o3, DType::bf16), {0, 2, 1, 3}), DType::f32) * 2.0);
  // Read twice, once through a reshape by the permute: the permute keeps its launch.
  Tensor s2 = softmax(s * 2.0);
  g.output("reshaped_permuted", permute(reshape(s2, {2, 3, 35}), {1, 0, 2}) + 0.0);
  g.output("s2", s2 * 1.5);

  const auto [fused, fused_dispatches, unfused, unfused_dispatches] =
      testing::run_fused_and_unfused(g, feeds);
  const auto ref = reference::evaluate(g, feeds);
  for (const auto& [name, expected] : ref) {
    EXPECT_EQ(fused.at(name).data, unfused.at(name).data) << name;
    // bf16's rounding may differ by a unit where the reference computes in f64.
    const double tol = name == "merged_bf16" || name == "o3_merged" ? 1e-2 : 1e-5;
    EXPECT_TRUE(testing::elementwise_near(fused.at(name), expected, tol)) << name;
  }
  plan::PlanOptions po;
  po.device.storage_16bit = true;
  const plan::StepPlan p = plan::make_step_plan(g, po);
  std::map<std::string, int> stored, twins, permutes;
  for (const plan::PlannedLaunch& l : p.launches) {
    const std::string op(p.graph.node(l.nodes.front()).op_name());
    if (l.kernel.name.find("+store[permute(") != std::string::npos) ++stored[op];
    if (l.kernel.name.find(",permute(") != std::string::npos) ++twins[op];
    if (op == "permute")
      ++permutes[std::string(p.graph.node(p.graph.node(l.nodes.front()).inputs[0]).op_name())];
  }
  EXPECT_EQ(stored["scaled_dot_product_attention"], 2);
  EXPECT_EQ(stored["softmax"], 1);
  EXPECT_EQ(twins["softmax"], 1);                       // the one read twice
  EXPECT_EQ(twins["scaled_dot_product_attention"], 1);  // read by the reduction too
  EXPECT_EQ(permutes["softmax"], 0);
  EXPECT_EQ(permutes["reshape"], 1);  // the reshaped softmax read twice
  int reductions = 0;
  for (const auto& [op, n] : stored)
    reductions += op != "scaled_dot_product_attention" && op != "softmax" ? n : 0;
  EXPECT_EQ(reductions, 2);
}

// Products on the kernels that store element by element (scalar tiles, K split over
// workgroups, the GEMV), alone or with an epilogue, store their result in the permute's layout
// through their C_st: the same bits as the unfused kernels, the reference's values, no permute
// launch.
TEST(PermutedStoresGpu, ProductsStoredPermutedElementByElement) {
  Graph g;
  reference::Feeds feeds;
  testing::RandomInputs input{g, feeds, testing::rng_for("permuted-products")};
  Tensor x = input("x", {2, 24, 40});
  Tensor w = input("w", {48, 40});
  Tensor b = input("b", {48});
  Tensor xl = input("xl", {1, 16, 4096});
  Tensor wl = input("wl", {4096, 32});
  Tensor xv = input("xv", {1, 1, 64});
  Tensor wv = input("wv", {96, 64});
  const std::vector<int64_t> heads{0, 2, 1, 3};
  g.output("lone", permute(reshape(matmul(x, w, false, true), {2, 24, 6, 8}), heads) * 2.0);
  g.output("biased", permute(reshape(matmul(x * 0.5, w, false, true) + b, {2, 24, 6, 8}), heads));
  g.output("long_k", permute(reshape(matmul(xl, wl), {1, 16, 4, 8}), heads) + 1.0);
  // One row: its heads' permute moves an axis of one, a view; their transpose is not.
  g.output("vector",
           permute(reshape(matmul(xv, wv, false, true), {1, 1, 12, 8}), {0, 1, 3, 2}) * 3.0);

  const auto [fused, fused_dispatches, unfused, unfused_dispatches] =
      testing::run_fused_and_unfused(g, feeds);
  const auto ref = reference::evaluate(g, feeds);
  for (const auto& [name, expected] : ref) {
    EXPECT_EQ(fused.at(name).data, unfused.at(name).data) << name;
    EXPECT_TRUE(testing::elementwise_near(fused.at(name), expected, 1e-4)) << name;
  }
  std::map<std::string, int> stored;
  int permutes = 0;
  for (const plan::PlannedLaunch& l : plan::make_step_plan(g, {}).launches) {
    if (l.kernel.name == "permute") ++permutes;
    if (l.kernel.name.find("+store[permute(") != std::string::npos) {
      ++stored[l.kernel.name.find("+epilogue[") != std::string::npos ? "epilogue" : "lone"];
    }
  }
  EXPECT_EQ(permutes, 0);
  EXPECT_EQ(stored["lone"], 3);
  EXPECT_EQ(stored["epilogue"], 1);
}

// On a device with tensor-addressed matrices (the H200's traits, bf16 products), products whose
// result a permute alone reads store it permuted through their tiles: a gradient split into
// heads through a reshape, a batched product's heads merged back. The permute launches are
// gone; a product read twice keeps its permute; on a device without tensor addressing the
// products' own kernels store them permuted element by element (the test above).
TEST(PermutedStores, ProductsStoreThroughTheirTilesOnTensorAddressedDevices) {
  Graph g;
  Tensor x = g.input("x", {1, 256, 576});
  Tensor w = g.input("w", {576, 576});
  Tensor p = g.input("p", {1, 3, 256, 768});
  Tensor v = g.input("v", {1, 3, 768, 64});
  g.output("heads", permute(reshape(matmul(x, w), {1, 256, 9, 64}), {0, 2, 1, 3}) * 2.0);
  g.output("merged", permute(matmul(p, v), {0, 2, 1, 3}) + 1.0);
  Tensor twice = matmul(x * 0.5, w);
  g.output("twice_permuted", permute(reshape(twice, {1, 256, 9, 64}), {0, 2, 1, 3}) * 3.0);
  g.output("twice", twice * 1.5);
  plan::PlanOptions po;
  po.device = codegen::testing::h200_wg_traits();
  po.device.storage_16bit = true;
  po.device.coop_tensor = true;
  po.device.coop_wg_bf16_granularity = po.device.coop_wg_granularity;
  po.precision = DType::bf16;
  auto count = [&](const plan::PlanOptions& o) {
    std::map<std::string, int> n;
    for (const plan::PlannedLaunch& l : plan::make_step_plan(g, o).launches) {
      if (l.kernel.name.find("+store[permute(0,2,1,3)]") != std::string::npos) {
        ++n[l.kernel.name.rfind("matmul_tensor_", 0) == 0 ? "stored" : "stored elsewhere"];
      }
      if (l.kernel.name == "permute") ++n["permutes"];
    }
    return n;
  };
  std::map<std::string, int> n = count(po);
  EXPECT_EQ(n["stored"], 2);
  EXPECT_EQ(n["permutes"], 1);  // the product read twice
  plan::PlanOptions plain;
  plain.device.storage_16bit = true;
  plain.precision = DType::bf16;
  n = count(plain);
  EXPECT_EQ(n["stored"], 0);
  EXPECT_EQ(n["stored elsewhere"], 2);
  EXPECT_EQ(n["permutes"], 1);
}

}  // namespace
}  // namespace mn
