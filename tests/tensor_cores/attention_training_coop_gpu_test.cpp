// Attention's training kernels on tensor cores on the device: the subgroup-matrix kernels
// (codegen/lower_attention_training_coop.h) and, with MN_TENSOR_ATTENTION=1, the gradient kernels
// on workgroup-scope tensor-addressed matrices (codegen/lower_attention_training_tensor.h): the
// log-sum-exp and the gradients of q, k and v from a random dout against the float64
// reference (with and without the fused outputs: dK's kernel storing dV, schedule/grad_kv.h, and
// the tensor-core forward the log-sum-exp, schedule/saved_lse.h), at the head sizes models use,
// causal grouped-query heads over several blocks, additive masks, Lq != Lk; f32 operands with the
// kernels asked for (MN_COOP_ATTENTION=1) and bf16 operands, which take them by choice. Their
// matrices read bf16 (8 significant bits, u = 2^-9): the operands, P and dS are each rounded, and
// dS = P·(dP - delta) cancels where dP is near delta, so the bound is 30 u, 6e-2 of each element or
// of a tenth of the tensor's largest (the H200 measured up to 4.0e-2 on these cases; a wrong mask,
// scale, head or block is off by far more).
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <meganeura/autodiff.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/attention_tensor_tiles.h"
#include "runtime/plan_options.h"
#include "support/attention_problem.h"
#include "support/elementwise_error.h"
#include "support/scoped_env.h"
#include "support/tensor_cores.h"

namespace mn {
namespace {

using Case = testing::AttentionCase;

class AttentionTrainingCoopGpu : public ::testing::TestWithParam<Case> {};

// The step's kernels, each attention training op its own (fused = false) or with the values
// the kernels compute on the way taken as second outputs (MN_FUSED_ATTENTION_OUTPUTS=1: dK's
// kernel stores dV, the tensor-core forward the log-sum-exp); the gradient kernels on
// subgroup matrices ("_coop") or on tensor-addressed workgroup matrices ("_tensor").
void check_gradients(const Case& c, bool fused, const std::string& kind) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  testing::ScopedEnv outputs("MN_FUSED_ATTENTION_OUTPUTS", fused ? "1" : "0");
  testing::ScopedEnv tensor("MN_TENSOR_ATTENTION", kind == "_tensor" ? "1" : "0");
  // f32 operands take the tensor-core kernels only when asked; bf16 ones by choice.
  testing::ScopedEnv coop("MN_COOP_ATTENTION", c.dtype == DType::f32 ? "1" : nullptr);
  testing::AttentionProblem p = testing::attention_problem(c, "attention-training-coop-gpu/");
  ASSERT_EQ(p.grad_ops, 3) << "the gradients do not come from the attention gradient ops";
  const Graph& g = p.graph;
  const reference::Feeds& feeds = p.feeds;
  SessionOptions so;
  so.profile = true;
  auto session = build_session(g, so);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  std::set<std::string> ran;
  for (const KernelTime& t : session->profile()) ran.insert(t.name);
  const std::vector<std::string> kernels_run =
      fused ? std::vector<std::string>{"attention_grad_q", "attention_grad_kv"}
            : std::vector<std::string>{"attention_grad_q", "attention_grad_k", "attention_grad_v"};
  for (const std::string& kernel : kernels_run) {
    // The tensor-addressed kernels may split their tiles' blocks ("_tensor_split3").
    const bool found =
        ran.contains(kernel + kind) ||
        (kind == "_tensor" && std::any_of(ran.begin(), ran.end(), [&](const auto& n) {
           return n.starts_with(kernel + kind + "_split");
         }));
    EXPECT_TRUE(found) << kernel + kind << " did not run";
  }
  // The log-sum-exp: its own kernel, or stored by the forward (tensor-core or f32 tiles).
  const bool saved = ran.contains("attention_coop+lse") ||
                     std::any_of(ran.begin(), ran.end(),
                                 [](const std::string& n) {
                                   return n.starts_with("attention_tensor") && n.ends_with("+lse");
                                 }) ||
                     ran.contains("attention_tiled_registers+lse") ||
                     ran.contains("attention_tiled+lse");
  EXPECT_TRUE(saved || ran.contains("attention_lse_coop")) << "no log-sum-exp kernel ran";
  const auto want = reference::evaluate(g, feeds);
  for (const char* name : {"dq", "dk", "dv"}) {
    EXPECT_TRUE(testing::elementwise_near(session->get(name), want.at(name), 6e-2)) << name;
  }
}

TEST_P(AttentionTrainingCoopGpu, GradientsMatchTheReference) {
  MN_REQUIRE_COOP_PATH(testing::CoopPath::bf16);
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused outputs" : "one kernel an op");
    check_gradients(GetParam(), fused, "_coop");
  }
}

TEST_P(AttentionTrainingCoopGpu, TensorAddressedGradientsMatchTheReference) {
  MN_REQUIRE_COOP_PATH(testing::CoopPath::bf16);
  MN_REQUIRE_COOP_PATH(testing::CoopPath::tensor);
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused outputs" : "one kernel an op");
    check_gradients(GetParam(), fused, "_tensor");
  }
}

// Every tile of the gradient kernels and of the forward storing the log-sum-exp
// (MN_TENSOR_ATTENTION_GRAD_TILE, MN_TENSOR_ATTENTION_TILE) that fits the case's heads: other
// rows per workgroup, blocks and workgroup sizes.
TEST_P(AttentionTrainingCoopGpu, EveryTensorAddressedTile) {
  MN_REQUIRE_COOP_PATH(testing::CoopPath::bf16);
  MN_REQUIRE_COOP_PATH(testing::CoopPath::tensor);
  const codegen::DeviceTraits device = runtime::plan_options("").device;
  const Case& c = GetParam();
  const auto d = static_cast<uint64_t>(c.d), dv = static_cast<uint64_t>(c.dv);
  for (const codegen::AttentionTensorTile& named : codegen::attention_tensor_tiles()) {
    SCOPED_TRACE(named.name);
    codegen::DeviceTraits forced = device;
    forced.tensor_attention_grad_tile = named.name;
    const codegen::AttentionTensorTile tile = codegen::training_attention_tile(forced, d, dv);
    if (!codegen::training_attention_fits(tile, d, dv, device.coop_wg_bf16_granularity, device)) {
      continue;
    }
    testing::ScopedEnv grad("MN_TENSOR_ATTENTION_GRAD_TILE", named.name);
    testing::ScopedEnv forward("MN_TENSOR_ATTENTION_TILE", named.name);
    check_gradients(c, true, "_tensor");
  }
}

// The gradient kernels with every tile's blocks split into segments of four (the tile's last
// workgroup adding the segments' results) and without splits: both match the reference, the
// split kernels ran, and the split step gives the same bits every run (the segments' results
// added in segment order whichever workgroup finishes last). Cases long enough to split: causal
// grouped heads at 600 (dK and dV: 30 blocks for the first tile, 8 segments; dQ: up to 10
// blocks), values of 128 with a mask over 520 keys in bf16.
TEST(AttentionTrainingSplitGpu, SplitTensorAddressedGradients) {
  MN_REQUIRE_COOP_PATH(testing::CoopPath::bf16);
  MN_REQUIRE_COOP_PATH(testing::CoopPath::tensor);
  for (const Case& c :
       {Case{"d64_causal_gqa_600", 1, 9, 3, 600, 600, 64, 64, true, false},
        Case{"d64_dv128_mask_bf16", 1, 2, 1, 300, 520, 64, 128, false, true, DType::bf16}}) {
    SCOPED_TRACE(c.label);
    for (const char* fills : {"0", "9999"}) {
      SCOPED_TRACE(std::string("MN_TENSOR_ATTENTION_GRAD_FILLS=") + fills);
      testing::ScopedEnv split("MN_TENSOR_ATTENTION_GRAD_FILLS", fills);
      check_gradients(c, true, "_tensor");
    }
    testing::ScopedEnv split("MN_TENSOR_ATTENTION_GRAD_FILLS", "9999");
    testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
    testing::ScopedEnv tensor("MN_TENSOR_ATTENTION", "1");
    testing::ScopedEnv coop("MN_COOP_ATTENTION", c.dtype == DType::f32 ? "1" : nullptr);
    testing::AttentionProblem p = testing::attention_problem(c, "attention-split-gpu/");
    SessionOptions so;
    so.profile = true;
    auto session = build_session(p.graph, so);
    for (const auto& [name, value] : p.feeds) session->set(name, value);
    session->step();
    std::string ran;
    for (const KernelTime& t : session->profile()) ran += t.name + " ";
    EXPECT_NE(ran.find("attention_grad_kv_tensor_split"), std::string::npos) << ran;
    EXPECT_NE(ran.find("attention_grad_q_tensor_split"), std::string::npos) << ran;
    std::vector<std::vector<float>> first;
    for (const char* name : {"dq", "dk", "dv"}) first.push_back(session->get(name).to_f32());
    for (int run = 0; run < 4; ++run) {
      session->step();
      int i = 0;
      for (const char* name : {"dq", "dk", "dv"}) {
        EXPECT_EQ(session->get(name).to_f32(), first[i++]) << name << ", run " << run;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    HeadSizes, AttentionTrainingCoopGpu,
    ::testing::Values(
        Case{"d64_causal_gqa", 1, 9, 3, 200, 200, 64, 64, true, false},
        Case{"d64_causal_gqa_bf16", 2, 4, 2, 130, 130, 64, 64, true, false, DType::bf16},
        Case{"d128_causal_gqa", 1, 3, 1, 80, 80, 128, 128, true, false},
        Case{"d64_mask_long_key", 2, 2, 1, 40, 100, 64, 64, false, true},
        Case{"d64_dv128_causal_mask_long_query", 1, 2, 2, 90, 40, 64, 128, true, true},
        Case{"d96_dv32_mask_long_key", 2, 2, 2, 20, 130, 96, 32, false, true},
        Case{"d32_dv48_causal_mask_long_query_bf16", 1, 2, 1, 90, 40, 32, 48, true, true,
             DType::bf16}),
    [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace mn
