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

#include "support/elementwise_error.h"
#include "support/random_fill.h"

#include "support/scoped_env.h"

namespace mn {
namespace {

struct Case {
  std::string label;
  int64_t batch, hq, hkv, lq, lk, d, dv;
  bool causal, mask;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

class AttentionTrainingGpu : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTrainingGpu, ForwardAndGradientsMatchTheReference) {
  const Case& c = GetParam();
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  // The forward on the f32 kernels, so that the gradients meet f32's agreement (the tensor-core
  // forward rounds its operands to f16; tests/tensor_cores checks it).
  testing::ScopedEnv f32_forward("MN_COOP_ATTENTION", "0");
  Graph g;
  Tensor q = g.input("q", {c.batch, c.hq, c.lq, c.d});
  Tensor k = g.input("k", {c.batch, c.hkv, c.lk, c.d});
  Tensor v = g.input("v", {c.batch, c.hkv, c.lk, c.dv});
  Tensor dout = g.input("dout", {c.batch, c.hq, c.lq, c.dv});
  Tensor mask = c.mask ? g.input("mask", {c.lq, c.lk}) : Tensor{};
  Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal);
  const std::vector<Tensor> grads = gradients(out, {q, k, v}, dout);
  g.output("out", out);
  g.output("dq", grads[0]);
  g.output("dk", grads[1]);
  g.output("dv", grads[2]);
  size_t grad_ops = 0;
  for (const Node& n : g.nodes()) grad_ops += n.op_name().starts_with("attention_grad_");
  ASSERT_EQ(grad_ops, 3u) << "the gradients do not come from the attention gradient ops";

  auto rng = testing::rng_for("attention-training-gpu/" + c.label);
  reference::Feeds feeds;
  const std::pair<const char*, Tensor> operands[] = {{"q", q}, {"k", k}, {"v", v}, {"dout", dout}};
  for (const auto& [name, t] : operands) {
    feeds[name] = testing::random_array(rng, t.type(), -1.0, 1.0);
  }
  if (c.mask) feeds["mask"] = testing::random_array(rng, mask.type(), -2.0, 0.0);
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
