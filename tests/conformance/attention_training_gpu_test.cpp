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
