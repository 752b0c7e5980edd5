#include "optimize/cost_model.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "ir/op_def.h"
#include "ir/ops/matmul.h"
#include "ir/ops/shape.h"

namespace mn::optimize {
namespace {

TEST(CostModel, BytesFlopsAndDispatches) {
  CostModel m;
  const TensorType a{{8, 16}, DType::f32}, b{{16, 4}, DType::f32}, c{{8, 4}, DType::f32};
  const TensorType ab[] = {a, b};
  NodeEstimate mm = m.estimate(op_def("matmul"), MatmulAttrs{}, ab, c);
  EXPECT_DOUBLE_EQ(mm.flops, 2.0 * 8 * 16 * 4);
  EXPECT_DOUBLE_EQ(mm.bytes, 4.0 * (8 * 16 + 16 * 4 + 8 * 4));
  EXPECT_EQ(mm.dispatches, 1);
  // The transposed-operand form reads the same bytes and does the same work.
  const TensorType at{{16, 8}, DType::f32};
  const TensorType atb[] = {at, b};
  EXPECT_DOUBLE_EQ(m.estimate(op_def("matmul"), MatmulAttrs{true, false}, atb, c).flops, mm.flops);
  // Pointwise: bytes, one FLOP per element, no dispatch (fused downstream).
  const TensorType aa[] = {a, a};
  NodeEstimate add = m.estimate(op_def("add"), {}, aa, a);
  EXPECT_DOUBLE_EQ(add.bytes, 3.0 * 4 * 128);
  EXPECT_DOUBLE_EQ(add.flops, 128);
  EXPECT_EQ(add.dispatches, 0);
  // Reshape is a view: free.
  const TensorType one[] = {a};
  NodeEstimate view = m.estimate(op_def("reshape"), ReshapeAttrs{{128}}, one, {{128}, DType::f32});
  EXPECT_EQ(view.bytes + view.flops + view.dispatches, 0);
  // f16 halves the bytes.
  const TensorType h{{8, 16}, DType::f16};
  const TensorType hh[] = {h, h};
  EXPECT_DOUBLE_EQ(m.estimate(op_def("add"), {}, hh, h).bytes, add.bytes / 2);
}

TEST(CostModel, SecondsFollowTheDeviceParameters) {
  CostParams p;
  p.bytes_per_second = 1e9;
  p.flops_per_second = 1e9;
  p.seconds_per_dispatch = 1e-3;
  CostModel m(p);
  NodeEstimate e{1e9, 2e9, 1};
  EXPECT_NEAR(m.seconds(op_def("matmul"), e), 1 + 2 + 1e-3, 1e-9);
}

// The composites with a kernel of their own that models are built from must be cheaper than
// their decomposition (extraction then keeps them); composites without a kernel must cost more
// (they are decomposed anyway). Other composites may go either way: batch_norm in evaluation
// mode or an unreduced loss decompose into pointwise ops that fuse, which is cheaper.
TEST(CostModel, CompositesAgainstTheirDecompositions) {
  CostModel m;
  size_t with_kernel = 0, without = 0;
  for (const OpDef* def : all_op_defs()) {
    if (!def->decompose || !def->samples) continue;
    static const std::set<std::string> kernels = {
        "softmax", "log_softmax", "rms_norm",      "layer_norm",
        "silu",    "gelu",        "cross_entropy", "scaled_dot_product_attention"};
    const bool has_kernel = codegen::find_lowering(def->name) != nullptr;
    if (has_kernel && !kernels.count(def->name)) continue;
    for (const OpSample& s : def->samples()) {
      Graph whole, parts;
      std::vector<Tensor> in_whole, in_parts;
      for (size_t i = 0; i < s.inputs.size(); ++i) {
        const std::string name = "in" + std::to_string(i);
        in_whole.push_back(whole.input(name, s.inputs[i].shape, s.inputs[i].dtype));
        in_parts.push_back(parts.input(name, s.inputs[i].shape, s.inputs[i].dtype));
      }
      Tensor y = whole.apply(def->name, s.attrs, in_whole);
      whole.output("y", y);
      parts.output("y", def->decompose(whole.node(y.id()), in_parts));
      const double composite = m.estimate(whole).seconds;
      const double decomposed = m.estimate(parts).seconds;
      SCOPED_TRACE(def->name + " " + s.label);
      if (has_kernel) {
        EXPECT_LT(composite, decomposed);
        ++with_kernel;
      } else {
        EXPECT_GT(composite, decomposed);
        ++without;
      }
    }
  }
  EXPECT_GT(with_kernel, 8u);
  std::printf("samples: %zu composites with a kernel, %zu without\n", with_kernel, without);
}

}  // namespace
}  // namespace mn::optimize
