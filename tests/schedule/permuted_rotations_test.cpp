// Rotations reading their operand through the permute that splits the heads out and storing
// their result through the permute that merges them back (schedule/permuted_rotations.h): the
// permutes' launches disappear from a causal LM's training step; the values equal the unfused
// kernels' bit for bit and the reference's, forward and backward, with the last axis kept and
// other permutations left alone.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/causal_lm.h>
#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "schedule/tiny_causal_lm.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// Rotations computed by launches named `name`, alone or with a second one stacked beside
// (schedule/stacked_rotations.h: "+stacked"), maybe storing twins ("+twin[bf16]").
size_t rotations_named(const plan::StepPlan& p, const std::string& name) {
  size_t n = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    if (!l.kernel.name.starts_with(name)) continue;
    std::string rest = l.kernel.name.substr(name.size());
    const bool stacked = rest.starts_with("+stacked");
    if (stacked) rest = rest.substr(8);
    while (rest.starts_with("+twin[")) rest = rest.substr(rest.find(']') + 1);
    if (rest.empty()) n += stacked ? 2 : 1;
  }
  return n;
}

TEST(PermutedRotations, ACausalLmStepRotatesThroughItsHeadPermutes) {
  const CausalLm m = testing::tiny_causal_lm_step(2);
  for (DType precision : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(precision));
    plan::PlanOptions po;
    po.precision = precision;
    po.device.storage_16bit = true;
    const plan::StepPlan p = plan::make_step_plan(*m.graph, po);
    // q and k of each layer: rotated from the projection's layout, their gradients rotated back
    // into it. In bf16 products the rotations also store the bf16 copy the gradient's products
    // read (schedule/narrowed_stores.h).
    EXPECT_EQ(rotations_named(p, "rope_positions+prologue[permute]"), 4u);
    EXPECT_EQ(rotations_named(p, "rope_positions_backward+epilogue[permute]"), 4u);
    // No permute launch reads a rotation's result or feeds a rotation.
    for (const plan::PlannedLaunch& l : p.launches) {
      const Node& n = p.graph.node(l.nodes.front());
      if (n.op_name() != "permute" || l.nodes.size() != 1) continue;
      const std::string_view from = p.graph.node(n.inputs[0]).op_name();
      EXPECT_NE(from, "rope_positions_backward");
    }
  }
}

// rope(permute(x)) forward, and its gradient through rope_positions_backward and the permute
// back; a permute moving the last axis stays a permute.
TEST(PermutedRotationsGpu, ValuesMatchTheUnfusedKernelsAndTheReference) {
  Graph g;
  reference::Feeds feeds;
  testing::RandomInputs input{g, feeds, testing::rng_for("permuted-rotations")};
  Tensor x = input("x", {2, 16, 3, 8});  // [B, L, H, D]
  Tensor w = input("w", {2, 3, 16, 8});
  Tensor z = input("z", {2, 16, 8, 3});
  Array pos({1, 16}, DType::i32);
  for (int64_t l = 0; l < 16; ++l)
    pos.data[static_cast<size_t>(l)] = static_cast<double>(5 * l + 1);
  Tensor rows = unsqueeze(g.constant(pos), 1);
  Tensor y = rope_positions(permute(x, {0, 2, 1, 3}), rows);
  Tensor moved = rope_positions(permute(z, {0, 3, 1, 2}), rows);  // the last axis moves
  Tensor loss = sum(y * w) + sum(moved * moved);
  const std::vector<Tensor> grads = gradients(loss, {x, z});
  g.output("y", y);
  g.output("dx", grads[0]);
  g.output("dz", grads[1]);

  auto run = [&](bool fused) {
    std::optional<testing::ScopedEnv> off;
    if (!fused) off.emplace("MN_FUSION", "0");
    auto s = build_session(g);
    for (const auto& [name, value] : feeds) s->set(name, value);
    s->step();
    std::map<std::string, Array> out;
    for (const char* name : {"y", "dx", "dz"}) out[name] = s->get(name);
    return std::pair{out, s->memory().dispatches};
  };
  const auto [fused, fused_dispatches] = run(true);
  const auto [unfused, unfused_dispatches] = run(false);
  const auto ref = reference::evaluate(g, feeds);
  for (const char* name : {"y", "dx", "dz"}) {
    EXPECT_EQ(fused.at(name).data, unfused.at(name).data) << name;
    EXPECT_TRUE(testing::elementwise_near(fused.at(name), ref.at(name), 1e-5)) << name;
  }
  EXPECT_LT(fused_dispatches, unfused_dispatches);
  plan::PlanOptions po;
  const plan::StepPlan p = plan::make_step_plan(g, po);
  // Forward: both rotations in one launch (x's through its permute; z's permute moves the last
  // axis and stays). Backward: x's gradient stored through the permute back; z's through a
  // permuted store (schedule/permuted_stores.h), which any permutation takes.
  EXPECT_EQ(rotations_named(p, "rope_positions+prologue[permute]"), 2u);
  EXPECT_EQ(rotations_named(p, "rope_positions_backward+epilogue[permute]"), 1u);
  EXPECT_EQ(rotations_named(p, "rope_positions_backward+store[permute(0,2,3,1)]"), 1u);
  EXPECT_EQ(rotations_named(p, "permute"), 1u);
}

}  // namespace
}  // namespace mn
