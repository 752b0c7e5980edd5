#include "codegen/widened_operands.h"

#include <string_view>

#include "codegen/lower_matmul.h"
#include "codegen/lower_matmul_coop.h"

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

}  // namespace

bool reads_widened_operand(const LowerContext& ctx, int input, DType narrow) {
  if (narrow != DType::f16 && narrow != DType::bf16) return false;
  if (!ctx.device.storage_16bit || ctx.inputs[static_cast<size_t>(input)].dtype != DType::f32) {
    return false;
  }
  const std::string_view op = ctx.node.op_name();
  if (op == "matmul") return input < 2 && matmul_reads_widened(ctx, input, narrow);
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
  // Not attention: its kernels load 16-bit operands through their loaders too, but its training
  // kernels measured up to 1.5x slower so (docs/perf.md), so they keep reading f32 copies.
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
