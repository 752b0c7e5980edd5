// Attention's training kernels at the head sizes models use (the op table's samples are tiny):
// the output and the gradients of q, k and v from a random dout, on the GPU against the float64
// reference, for head_dim 64 and 128 with causal grouped-query heads over more than one block of
// 64 keys, with an additive mask and Lq != Lk (the register-tiled kernels, in every tile shape the
// device's shared memory picks), and for other sizes (the scalar kernels).
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/attention_problem.h"
#include "support/elementwise_error.h"

#include "support/scoped_env.h"

namespace mn {
namespace {

using Case = testing::AttentionCase;

class AttentionTrainingGpu : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTrainingGpu, ForwardAndGradientsMatchTheReference) {
  const Case& c = GetParam();
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  // The forward on the f32 kernels, so that the gradients meet f32's agreement (the tensor-core
  // forward rounds its operands to f16; tests/tensor_cores checks it).
  testing::ScopedEnv f32_forward("MN_COOP_ATTENTION", "0");
  testing::AttentionProblem p = testing::attention_problem(c, "attention-training-gpu/");
  ASSERT_EQ(p.grad_ops, 3) << "the gradients do not come from the attention gradient ops";
  const Graph& g = p.graph;
  const reference::Feeds& feeds = p.feeds;
  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  const auto want = reference::evaluate(g, feeds);
  // f32 sums over up to a few hundred terms: 1e-4 of each element, or of a tenth of the
  // tensor's largest where terms cancel.
  for (const char* name : {"out", "dq", "dk", "dv"}) {
    EXPECT_TRUE(testing::elementwise_near(session->get(name), want.at(name), 1e-4)) << name;
  }
}

// bf16 operands: the log-sum-exp and delta the backward reads are f32 (a bf16 log-sum-exp near
// 5 is off by up to 2^-9 · 8 = 0.016, and every probability recomputed from it by as much,
// relatively), so the gradients differ from the float64 gradients of the same values only by
// the rounding of the stored output (which delta reads, and dS = P·(dP - delta) cancels) and of
// their own: 1.5e-2 of each element or of a tenth of the largest (lavapipe: 1.0e-2 for dq,
// 4.8e-3 for dk, 2.8e-3 for dv; with a bf16 log-sum-exp and delta 3.0e-2, 2.5e-2, 2.1e-2).
TEST(AttentionTrainingBf16, TheLogSumExpAndDeltaStayF32) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  testing::ScopedEnv f32_forward("MN_COOP_ATTENTION", "0");
  const Case c{"d64_causal_gqa_bf16", 1, 4, 2, 70, 70, 64, 64, true, false, DType::bf16};
  testing::AttentionProblem p = testing::attention_problem(c, "attention-training-bf16/");
  for (const Node& n : p.graph.nodes()) {
    if (n.op_name() == "attention_lse") EXPECT_EQ(n.type.dtype, DType::f32);
    // Their last operand: lse (attention_grad_v) or delta.
    if (n.op_name().starts_with("attention_grad_")) {
      EXPECT_EQ(p.graph.node(n.inputs.back()).type.dtype, DType::f32) << n.op_name();
    }
  }
  auto session = build_session(p.graph);
  for (const auto& [name, value] : p.feeds) session->set(name, value);
  session->step();
  // The same values in an f32 graph, evaluated in float64.
  Case wide = c;
  wide.dtype = DType::f32;
  testing::AttentionProblem w = testing::attention_problem(wide, "attention-training-bf16/");
  reference::Feeds feeds = p.feeds;
  for (auto& [name, value] : feeds) value.dtype = DType::f32;
  const auto want = reference::evaluate(w.graph, feeds);
  for (const char* name : {"dq", "dk", "dv"}) {
    EXPECT_TRUE(testing::elementwise_near(session->get(name), want.at(name), 1.5e-2)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    HeadSizes, AttentionTrainingGpu,
    ::testing::Values(Case{"d64_causal_gqa", 1, 4, 2, 70, 70, 64, 64, true, false},
                      Case{"d128_causal_gqa", 1, 3, 1, 80, 80, 128, 128, true, false},
                      Case{"d64_mask_long_key", 2, 2, 1, 40, 100, 64, 64, false, true},
                      Case{"d64_dv128_causal_mask_long_query", 1, 2, 2, 90, 40, 64, 128, true, true},
                      Case{"d96_mask_long_key", 2, 2, 2, 20, 130, 96, 32, false, true},
                      Case{"d32_causal_mask_long_query", 1, 2, 1, 90, 40, 32, 48, true, true}),
    [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace mn
