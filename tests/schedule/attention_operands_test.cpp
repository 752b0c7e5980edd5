// A bf16 training step's attention reading its operands in bf16 (optimize::MixedPrecisionOptions::
// attention_operands, codegen::attention_reads_bf16_operands): on a device whose tensor-addressed
// kernels serve attention, q, k, v and dout are rounded to bf16 in the graph, the rotations store
// the rounded value and the attention kernels bind the bf16 tensors themselves, so no f32 copy of
// them remains; elsewhere, with the switch off or in f32, attention's operands stay f32. (The
// kernels' values are checked on a GPU: tests/tensor_cores/coop_session_gpu_test.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "codegen/widened_operands.h"
#include "ir/ops/attention.h"
#include "optimize/mixed_precision.h"
#include "plan/step_plan.h"
#include "schedule/tensor_device.h"
#include "schedule/tiny_causal_lm.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using testing::tensor_device;

struct AttentionLaunches {
  int kernels = 0;        // launches of attention's forward and gradient ops
  int f32_operands = 0;   // their matrix operands bound as f32 tensors
  int bf16_operands = 0;  // ... as bf16 tensors
  size_t launches = 0;    // of the whole step
};

// The step's attention launches and the dtypes their q, k, v and dout bindings have.
AttentionLaunches attention_launches(const Graph& g, const codegen::DeviceTraits& device,
                                     DType precision) {
  plan::PlanOptions po;
  po.device = device;
  po.precision = precision;
  const plan::StepPlan p = plan::make_step_plan(g, po);
  AttentionLaunches a;
  a.launches = p.launches.size();
  for (const plan::PlannedLaunch& l : p.launches) {
    const size_t operands = ops::attention_matrix_operands(p.graph.node(l.nodes.front()).op_name());
    if (operands == 0) continue;
    ++a.kernels;
    const std::vector<NodeId>& inputs = p.groups[static_cast<size_t>(l.group)].inputs;
    for (size_t i = 0; i < operands; ++i) {
      const DType d = p.graph.node(inputs.at(i)).type.dtype;
      a.f32_operands += d == DType::f32;
      a.bf16_operands += d == DType::bf16;
    }
  }
  return a;
}

TEST(Bf16AttentionOperands, TensorKernelsBindBf16Tensors) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  const CausalLm m = testing::tiny_causal_lm_step(2);
  const codegen::DeviceTraits device = tensor_device();
  ASSERT_TRUE(codegen::attention_reads_bf16_operands(device));
  // Per layer: the forward (q, k, v), dQ and dK with dV (q, k, v, dout each).
  const AttentionLaunches bf16 = attention_launches(*m.graph, device, DType::bf16);
  EXPECT_EQ(bf16.kernels, 6);
  EXPECT_EQ(bf16.f32_operands, 0);
  EXPECT_EQ(bf16.bf16_operands, 22);

  // Off: the values' and dout's bf16 products are read as they are (widened exactly), the
  // rotations' f32 results stay f32 (rounded by the kernels as they load them).
  codegen::DeviceTraits off = device;
  off.bf16_attention_operands = false;
  EXPECT_FALSE(codegen::attention_reads_bf16_operands(off));
  const AttentionLaunches kept = attention_launches(*m.graph, off, DType::bf16);
  EXPECT_EQ(kept.kernels, 6);
  EXPECT_EQ(kept.bf16_operands, 0);
  EXPECT_EQ(kept.f32_operands, 22);
  // The f32 copies (the values' twin, dout's widening) were launches or outputs of their own.
  EXPECT_LT(bf16.launches, kept.launches);

  // An f32 step, and a device without the tensor-addressed kernels, keep f32 operands.
  EXPECT_EQ(attention_launches(*m.graph, device, DType::f32).bf16_operands, 0);
  codegen::DeviceTraits no_tensor = device;
  no_tensor.tensor_attention = false;
  EXPECT_FALSE(codegen::attention_reads_bf16_operands(no_tensor));
  EXPECT_EQ(attention_launches(*m.graph, no_tensor, DType::bf16).bf16_operands, 0);
}

// The rewrite itself: attention's q, k, v (and a gradient op's dout) read as cast(cast(x, bf16),
// f32), masks and statistics left alone; nothing changes without the option.
TEST(Bf16AttentionOperands, MixedPrecisionRoundsAttentionsMatrixOperands) {
  testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  const CausalLm m = testing::tiny_causal_lm_step(1);
  optimize::MixedPrecisionOptions o;
  o.attention_operands = true;
  for (const bool on : {false, true}) {
    SCOPED_TRACE(on);
    const Graph r = optimize::with_mixed_precision(*m.graph, DType::bf16,
                                                   on ? o : optimize::MixedPrecisionOptions{});
    int attention = 0, rounded = 0, other = 0;
    for (NodeId id = 0; id < static_cast<NodeId>(r.size()); ++id) {
      const Node& n = r.node(id);
      const size_t operands = ops::attention_matrix_operands(n.op_name());
      if (operands == 0) continue;
      ++attention;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const Node& in = r.node(n.inputs[i]);
        const bool pair = in.op_name() == "cast" && in.type.dtype == DType::f32 &&
                          r.node(in.inputs[0]).type.dtype == DType::bf16;
        (i < operands ? rounded : other) += pair;
      }
    }
    EXPECT_EQ(attention, 5);  // sdpa, attention_lse, dQ, dK, dV
    EXPECT_EQ(other, 0);
    // Off, only the values (a bf16 product widened) and dout arrive as widenings of bf16
    // products; on, every one of the 16 matrix operands does.
    if (on) {
      EXPECT_EQ(rounded, 16);
    } else {
      EXPECT_LT(rounded, 16);
    }
  }
}

}  // namespace
}  // namespace mn
