// Attention's key and value gradients from one kernel (schedule/grad_kv.h): where the
// tensor-core kernel serves, a training step's attention_grad_k kernel stores
// attention_grad_v's value too and no attention_grad_v kernel is planned; elsewhere both stay.
// Their results on the device: tests/tensor_cores/attention_training_coop_gpu_test.cpp.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "plan/step_plan.h"
#include "support/attention_problem.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using testing::AttentionCase;

std::multiset<std::string> planned_kernels(const Graph& g, const codegen::DeviceTraits& device) {
  plan::PlanOptions po;
  po.device = device;
  std::multiset<std::string> names;
  for (const plan::PlannedLaunch& l : plan::make_step_plan(g, po).launches) {
    names.insert(l.kernel.name);
  }
  return names;
}

// An H200 with bf16 subgroup matrices, its attention kernels on them.
codegen::DeviceTraits bf16_tensor_cores() {
  codegen::DeviceTraits t;
  t.subgroup_size = 32;
  t.subgroup_vote = true;
  t.max_workgroup_invocations = 1024;
  t.max_shared_bytes = 49152;
  t.storage_16bit = true;
  t.coop = true;
  t.coop_bf16 = true;
  t.multiprocessors = 132;
  t.coop_attention = codegen::DeviceTraits::Choice::always;
  t.fused_attention_outputs = true;
  return t;
}

TEST(GradKv, TheKeyGradientKernelStoresTheValueGradient) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  for (const AttentionCase& c :
       {AttentionCase{"d64_causal_gqa", 2, 9, 3, 200, 200, 64, 64, true, false, DType::bf16},
        AttentionCase{"d64_dv128_causal_mask", 1, 2, 2, 90, 40, 64, 128, true, true}}) {
    SCOPED_TRACE(c.label);
    const testing::AttentionProblem p = testing::attention_problem(c, "grad-kv/");
    const std::multiset<std::string> names = planned_kernels(p.graph, bf16_tensor_cores());
    EXPECT_EQ(names.count("attention_grad_kv_coop"), 1u);
    EXPECT_EQ(names.count("attention_grad_k_coop"), 0u);
    EXPECT_EQ(names.count("attention_grad_v_coop"), 0u);
    EXPECT_EQ(names.count("attention_grad_q_coop"), 1u);
  }
}

// The f32 kernels (no bf16 matrices), MN_COOP_ATTENTION=0 and the fused outputs off (the
// default until measured) keep both kernels.
TEST(GradKv, DevicesWithoutTheTensorCoreKernelKeepBothKernels) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  const AttentionCase c{"d64_causal_gqa", 2, 9, 3, 200, 200, 64, 64, true, false, DType::bf16};
  const testing::AttentionProblem p = testing::attention_problem(c, "grad-kv/");
  codegen::DeviceTraits no_bf16 = bf16_tensor_cores(), never = bf16_tensor_cores();
  no_bf16.coop_bf16 = false;
  never.coop_attention = codegen::DeviceTraits::Choice::never;
  for (const codegen::DeviceTraits& t : {no_bf16, never}) {
    const std::multiset<std::string> names = planned_kernels(p.graph, t);
    EXPECT_EQ(names.count("attention_grad_kv_coop"), 0u);
    EXPECT_EQ(names.count("attention_grad_k_tiled"), 1u);
    EXPECT_EQ(names.count("attention_grad_v_tiled"), 1u);
  }
  codegen::DeviceTraits off = bf16_tensor_cores();
  off.fused_attention_outputs = false;
  const std::multiset<std::string> names = planned_kernels(p.graph, off);
  EXPECT_EQ(names.count("attention_grad_kv_coop"), 0u);
  EXPECT_EQ(names.count("attention_grad_k_coop"), 1u);
  EXPECT_EQ(names.count("attention_grad_v_coop"), 1u);
}

}  // namespace
}  // namespace mn
