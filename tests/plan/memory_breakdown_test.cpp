// What fills a plan's arena (plan/memory_breakdown.h): persistent tensors by kind, the
// intermediates live at the peak by role, checked against sizes computed from the graph.
#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>

#include "codegen/coop_fixture.h"
#include "plan/memory_breakdown.h"
#include "plan/step_plan.h"

namespace mn {
namespace {

uint64_t bytes_of(const Graph& g, std::string_view op) {
  uint64_t total = 0;
  for (NodeId n = 0; n < static_cast<NodeId>(g.size()); ++n) {
    if (g.node(n).op_name() == op) total += plan::device_bytes(g.node(n).type);
  }
  return total;
}

// A transformer's training step (its optimizer updates in place).
TEST(MemoryBreakdown, TrainingStepByKindAndRole) {
  TransformerSpec spec = smollm2_135m();
  spec.layers = 2;
  spec.vocab = 256;
  spec.sequence = 32;
  LanguageModel c = build_transformer(spec);
  add_training_step(c.loss, Optimizer::adamw());
  const plan::StepPlan p = plan::make_step_plan(*c.graph, {});
  const plan::MemoryBreakdown m = plan::memory_breakdown(p);
  EXPECT_EQ(m.parameter_bytes, bytes_of(*c.graph, "parameter"));
  EXPECT_EQ(m.state_bytes, bytes_of(*c.graph, "state"));
  // AdamW keeps two moments per parameter (and a step count).
  EXPECT_GE(m.state_bytes, 2 * m.parameter_bytes);
  EXPECT_GT(m.io_bytes, 0u);  // the tokens and targets at least
  ASSERT_GE(m.peak_launch, 0);
  // At 32 tokens the gradients outweigh the activations: the peak comes just before the
  // optimizer updates, which run together at the end of the step, with every parameter's
  // gradient live.
  EXPECT_GE(m.backward_bytes, m.parameter_bytes);
  EXPECT_GE(static_cast<size_t>(m.peak_launch) + 8, p.launches.size());
  EXPECT_LE(m.peak_bytes(), m.transient_region_bytes);
  EXPECT_EQ(p.memory.persistent_bytes + m.transient_region_bytes, p.arena_bytes);
}

TEST(MemoryBreakdown, InferenceHasNoBackward) {
  ClassifierSpec spec;
  spec.batch = 32;
  spec.hidden = {64, 32};
  Classifier c = build_classifier(spec);
  const plan::MemoryBreakdown m = plan::memory_breakdown(plan::make_step_plan(*c.graph, {}));
  EXPECT_EQ(m.state_bytes, 0u);
  EXPECT_GT(m.activation_bytes, 0u);
  EXPECT_EQ(m.backward_bytes, 0u);
}

// Kernel scratch with no value behind it: the partial sums of a tensor-core product whose K is
// split (planned for an H200; nothing is compiled).
TEST(MemoryBreakdown, SplitKPartialsAreWorkspace) {
  Graph g;
  Tensor a = g.input("a", {256, 576}, DType::bf16), b = g.input("b", {576, 576}, DType::bf16);
  g.output("c", matmul(a, b));
  plan::PlanOptions po;
  po.device = codegen::testing::h200_wg_traits();
  po.device.coop_tensor = true;
  po.device.coop_wg_bf16_granularity = po.device.coop_wg_granularity;
  po.device.coop_tensor_tile = "t64x64k32";  // 36 tiles: split in 4
  const plan::StepPlan p = plan::make_step_plan(g, po);
  ASSERT_EQ(p.launches.size(), 1u);
  EXPECT_EQ(p.launches[0].kernel.name, "matmul_tensor_t64x64k32_split4");
  const plan::MemoryBreakdown m = plan::memory_breakdown(p);
  EXPECT_EQ(m.workspace_bytes, 4u * 256 * 576 * sizeof(float));
  EXPECT_EQ(m.persistent_workspace_bytes, 36u * sizeof(uint32_t));  // the tiles' counters
}

}  // namespace
}  // namespace mn
