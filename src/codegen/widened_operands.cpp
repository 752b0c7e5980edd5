#include "codegen/widened_operands.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "codegen/attention_shape.h"
#include "codegen/lower_attention_tensor.h"
#include "codegen/lower_attention_training_coop.h"
#include "codegen/lower_attention_training_tensor.h"

#include "codegen/lower_matmul.h"
#include "codegen/lower_matmul_coop.h"
#include "ir/ops/attention.h"

namespace mn::codegen {

namespace {

// The GEMV and the scalar tiled kernel load through A_ld/B_ld whatever the dtype; the
// tensor-core kernels load f32 or f16 only, so a bf16 operand would move the product off
// them: it is substituted only where the product is not on them anyway.
bool matmul_reads_widened(const LowerContext& ctx, int input, DType narrow) {
  const MatmulGeometry g = geometry(ctx);
  if (g.m == 1 || g.n == 1) return true;
  const int64_t batch = numel(g.out_batch);
  if (!coop_rejection(ctx, g, batch).empty()) return true;  // tiled either way
  std::vector<TensorType> narrowed(ctx.inputs.begin(), ctx.inputs.end());
  narrowed[static_cast<size_t>(input)].dtype = narrow;
  const LowerContext n{ctx.node, narrowed, ctx.device, ctx.in_place};
  return coop_rejection(n, g, batch).empty();
}

// Attention's tensor-addressed kernels (lower_attention_tensor.h,
// lower_attention_training_tensor.h) load a bf16 q, k, v or dout into their bf16 matrices as it is,
// where an f32 one is loaded as an accumulator, rounded and converted per block; a bf16 operand
// makes the forward's matrices bf16 (kernels/attention_tensor.comp), the gradients' always are. The
// other attention kernels keep their f32 copies: their training kernels measured slower on 16-bit
// operands.
bool attention_reads_widened(const LowerContext& ctx, int input, DType narrow) {
  const std::string_view op = ctx.node.op_name();
  if (narrow != DType::bf16 || !attention_reads_bf16_operands(ctx.device) ||
      static_cast<size_t>(input) >= ops::attention_matrix_operands(op)) {
    return false;
  }
  if (op == "scaled_dot_product_attention") {
    return attention_lowering::takes_tensor_forward(ctx, attention_lowering::AttentionShape(ctx));
  }
  using attention_training::Form;
  const Form f = op == "attention_grad_q"   ? Form::grad_q
                 : op == "attention_grad_k" ? Form::grad_k
                 : op == "attention_grad_v" ? Form::grad_v
                                            : Form::lse;
  std::vector<TensorType> narrowed(ctx.inputs.begin(), ctx.inputs.end());
  narrowed[static_cast<size_t>(input)].dtype = narrow;
  const LowerContext n{ctx.node, narrowed, ctx.device, ctx.in_place};
  // The log-sum-exp's own kernel (where the forward does not store it) is the subgroup-matrix
  // one, which loads bf16 operands as they are and rounds f32 ones to bf16 alike.
  const auto takes = f == Form::lse ? attention_training::takes_coop_training
                                    : attention_training::takes_tensor_training;
  return takes(ctx, f) && takes(n, f);
}

}  // namespace

bool attention_reads_bf16_operands(const DeviceTraits& d) {
  const bool bf16_matrices =
      std::any_of(d.coop_wg_bf16_granularity.begin(), d.coop_wg_bf16_granularity.end(),
                  [](const auto& g) { return g[0] != 0; });
  return d.bf16_attention_operands && d.tensor_attention && d.coop_tensor &&
         d.coop_tensor_conversions && d.coop_tensor_reductions &&
         d.coop_attention != DeviceTraits::Choice::never && d.storage_16bit && bf16_matrices;
}

bool reads_widened_operand(const LowerContext& ctx, int input, DType narrow) {
  if (narrow != DType::f16 && narrow != DType::bf16) return false;
  if (!ctx.device.storage_16bit || ctx.inputs[static_cast<size_t>(input)].dtype != DType::f32) {
    return false;
  }
  const std::string_view op = ctx.node.op_name();
  if (op == "matmul") return input < 2 && matmul_reads_widened(ctx, input, narrow);
  if (ops::attention_matrix_operands(op) > 0) return attention_reads_widened(ctx, input, narrow);
  return always_reads_widened(ctx.node, input);
}

bool always_reads_widened(const Node& node, int input) {
  const std::string_view op = node.op_name();
  // The table of an embedding lookup: copied element by element through its loader.
  if (op == "take") return input == 0;
  // A rotary embedding's x (lower_attention_rope.cpp): loaded through x_ld, rotated in f32.
  if (op == "rope_positions" || op == "rope_positions_backward") return input == 0;
  // A normalization's gamma and beta (lower_nn_rows.cpp, the GEMV's norm prologue): loaded
  // through their loaders. Not x, whose dtype rounds eps.
  if (op == "rms_norm" || op == "layer_norm") return input >= 1;
  // A cross-entropy's logits (lower_loss_class.cpp): loaded through zs_ld, computed in f32; a
  // bf16 step's LM head then has no f32 copy of its logits for the loss and its gradient.
  if (op == "cross_entropy" || op == "cross_entropy_backward") return input == 0;
  // Not attention: its kernels load 16-bit operands through their loaders too, but its
  // register-tiled training kernels measured up to 1.5x slower so (docs/perf.md); only the
  // tensor-addressed ones bind them (attention_reads_widened).
  return converting_copy(node) && input == 0;
}

bool converting_copy(const Node& node) {
  // Both gather through per-axis strides (lower_shape.cpp's strided_gather), never aliasing.
  const std::string_view op = node.op_name();
  return op == "permute" || op == "transpose";
}

bool stores_narrowed_result(const Node& node) {
  const std::string_view op = node.op_name();
  return op == "rope_positions" || op == "rope_positions_backward" || op == "rms_norm" ||
         op == "layer_norm" || op == "cross_entropy_backward" || converting_copy(node);
}

}  // namespace mn::codegen
