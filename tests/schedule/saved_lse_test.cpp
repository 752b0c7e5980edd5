// Flash attention's forward saving the log-sum-exp (schedule/saved_lse.h): in a training step
// the attention's kernel stores attention_lse's value and the separate pass over the keys
// disappears, for the register-tiled and the tiled forward kernels; the gradients then equal
// the float64 reference's as before. Kernels that cannot store it keep the separate pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/kernel.h"
#include "ir/ops/attention.h"
#include "plan/step_plan.h"
#include "schedule/tensor_device.h"
#include "support/attention_problem.h"
#include "support/elementwise_error.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using testing::AttentionCase;

// The launches' kernel names of the problem's step planned for `device` (`optimized`: through
// the e-graph, which merges equal nodes).
std::multiset<std::string> planned_kernels(const Graph& g, const codegen::DeviceTraits& device,
                                           bool optimized = true) {
  plan::PlanOptions po;
  po.device = device;
  po.optimize.enabled = optimized;
  std::multiset<std::string> names;
  for (const plan::PlannedLaunch& l : plan::make_step_plan(g, po).launches) {
    names.insert(l.kernel.name);
  }
  return names;
}

size_t starting_with(const std::multiset<std::string>& names, const std::string& prefix) {
  size_t n = 0;
  for (const std::string& s : names) n += s.starts_with(prefix);
  return n;
}

// A device with shared memory for the register tiles (48 KiB) and one with 16 KiB, where the
// tiled f32 kernel serves.
codegen::DeviceTraits with_shared(uint32_t bytes) {
  codegen::DeviceTraits t;
  t.max_shared_bytes = bytes;
  t.max_workgroup_invocations = 1024;
  return t;
}

using testing::tensor_device;

TEST(SavedLse, TheForwardKernelStoresTheLogSumExp) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  const AttentionCase c{"d64_causal_gqa", 1, 4, 2, 70, 70, 64, 64, true, false};
  const testing::AttentionProblem p = testing::attention_problem(c, "saved-lse/");
  const std::pair<uint32_t, const char*> devices[] = {{49152, "attention_tiled_registers+lse"},
                                                      {16384, "attention_tiled+lse"}};
  for (const auto& [shared, kernel] : devices) {
    SCOPED_TRACE(kernel);
    const std::multiset<std::string> names = planned_kernels(p.graph, with_shared(shared));
    EXPECT_EQ(names.count(kernel), 1u);
    EXPECT_EQ(starting_with(names, "attention_lse"), 0u);
  }
  // The tensor-core forward stores it where attention_lse would run on the bf16 training
  // kernels (their scores are its own, its operands rounded to bf16 as theirs); against the f32
  // training kernels' scores its f16 ones would be off: the separate pass stays there.
  codegen::DeviceTraits coop = with_shared(49152);
  coop.coop = true;
  coop.subgroup_size = 32;
  coop.subgroup_vote = true;
  coop.storage_16bit = true;
  coop.coop_attention = codegen::DeviceTraits::Choice::always;
  std::multiset<std::string> names = planned_kernels(p.graph, coop);
  EXPECT_EQ(names.count("attention_coop"), 1u);
  EXPECT_EQ(starting_with(names, "attention_lse"), 1u);
  coop.coop_bf16 = true;
  names = planned_kernels(p.graph, coop);  // fused outputs off (the default until measured)
  EXPECT_EQ(starting_with(names, "attention_lse"), 1u);
  coop.fused_attention_outputs = true;
  names = planned_kernels(p.graph, coop);
  EXPECT_EQ(names.count("attention_coop+lse"), 1u);
  EXPECT_EQ(starting_with(names, "attention_lse"), 0u);
}

// The tensor-addressed forward storing the log-sum-exp, its key blocks split or not
// ("attention_tensor_split4+lse").
bool saves_lse_on_tensor_cores(const std::string& kernel) {
  return kernel.starts_with("attention_tensor") && kernel.ends_with("+lse");
}

// The tensor-addressed forward stores it too, for f32 operands with bf16 products and for bf16
// operands (the attention benchmark's problem: causal grouped heads).
TEST(SavedLse, TheTensorAddressedForwardStoresIt) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  codegen::DeviceTraits t = tensor_device();
  for (const DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const AttentionCase c{"d64_causal_gqa", 2, 9, 3, 256, 256, 64, 64, true, false, dtype};
    const testing::AttentionProblem p = testing::attention_problem(c, "saved-lse-tensor/");
    codegen::DeviceTraits d = t;
    d.bf16_products = dtype == DType::f32;
    const std::multiset<std::string> names = planned_kernels(p.graph, d);
    EXPECT_EQ(std::count_if(names.begin(), names.end(), saves_lse_on_tensor_cores), 1);
    EXPECT_EQ(starting_with(names, "attention_lse"), 0u);
    EXPECT_EQ(starting_with(names, "attention_grad_kv_tensor"), 1u);
  }
}

// The launches' kernel names of the problem's step planned for `device`, in dispatch order.
std::vector<std::string> planned_order(const Graph& g, const codegen::DeviceTraits& device) {
  plan::PlanOptions po;
  po.device = device;
  std::vector<std::string> names;
  for (const plan::PlannedLaunch& l : plan::make_step_plan(g, po).launches) {
    names.push_back(l.kernel.name);
  }
  return names;
}

// Given the output's gradient (the attention benchmark's step), dV's kernel needs nothing of the
// forward and may be ordered before it: the forward still saves the log-sum-exp, and the readers
// of it run after the forward.
TEST(SavedLse, ReadersThatNeedNotWaitForTheForwardRunAfterIt) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  codegen::DeviceTraits t = tensor_device();
  const AttentionCase c{"d64_causal_gqa", 2, 9, 3, 2048, 2048, 64, 64, true, false, DType::bf16};
  const testing::AttentionProblem p = testing::attention_problem(c, "saved-lse-order/");
  const std::vector<std::string> order = planned_order(p.graph, t);
  const auto forward = std::find_if(order.begin(), order.end(), saves_lse_on_tensor_cores);
  std::string all;
  for (const std::string& n : order) all += n + "\n";
  ASSERT_NE(forward, order.end()) << all;
  for (auto it = order.begin(); it != order.end(); ++it) {
    EXPECT_FALSE(it->starts_with("attention_lse")) << *it;
    if (it->starts_with("attention_grad")) EXPECT_GT(it, forward) << *it;
  }
}

// A backward pass may read a recomputed copy of the attention's query (schedule/rematerialize.h
// copies a forward rotation for its backward readers): a copy of the same op over the same values
// is the same query, and the forward still saves the log-sum-exp; a different query is not.
TEST(SavedLse, ARecomputedCopyOfTheQueryIsTheSameQuery) {
  for (const bool copy : {true, false}) {
    SCOPED_TRACE(copy ? "a copy" : "another query");
    Graph g;
    Tensor q = g.input("q", {1, 4, 70, 64}), k = g.input("k", {1, 2, 70, 64});
    Tensor v = g.input("v", {1, 2, 70, 64});
    Tensor forward_q = q + q;
    Tensor backward_q = copy ? q + q : q + 1.0;
    g.output("out", scaled_dot_product_attention(forward_q, k, v, Tensor{}, true));
    g.output("lse",
             g.apply("attention_lse", Attrs(AttentionAttrs{true, 0.0, false}), {backward_q, k}));
    // Not optimized: the e-graph would merge the copy into the forward's query.
    const std::multiset<std::string> names = planned_kernels(g, with_shared(49152), false);
    EXPECT_EQ(names.count("attention_tiled_registers+lse"), copy ? 1u : 0u);
    EXPECT_EQ(starting_with(names, "attention_lse"), copy ? 0u : 1u);
  }
}

// On the test device, the step whose forward saved the log-sum-exp: the output and the
// gradients against float64, for a kernel of each kind and a masked case.
TEST(SavedLseGpu, GradientsMatchTheReference) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  testing::ScopedEnv f32_forward("MN_COOP_ATTENTION", "0");
  for (const AttentionCase& c :
       {AttentionCase{"d64_causal_gqa", 1, 4, 2, 70, 70, 64, 64, true, false},
        AttentionCase{"d64_dv128_causal_mask", 1, 2, 2, 90, 40, 64, 128, true, true},
        AttentionCase{"d96_mask_long_key", 2, 2, 2, 20, 130, 96, 32, false, true}}) {
    SCOPED_TRACE(c.label);
    const testing::AttentionProblem p = testing::attention_problem(c, "saved-lse-gpu/");
    SessionOptions so;
    so.profile = true;
    auto session = build_session(p.graph, so);
    for (const auto& [name, value] : p.feeds) session->set(name, value);
    session->step();
    bool saved = false, separate = false;
    for (const KernelTime& t : session->profile()) {
      saved = saved || t.name.ends_with("+lse");
      separate = separate || t.name.starts_with("attention_lse");
    }
    EXPECT_TRUE(saved);
    EXPECT_FALSE(separate);
    const auto want = reference::evaluate(p.graph, p.feeds);
    for (const char* name : {"out", "dq", "dk", "dv"}) {
      EXPECT_TRUE(testing::elementwise_near(session->get(name), want.at(name), 1e-4)) << name;
    }
  }
}

}  // namespace
}  // namespace mn
