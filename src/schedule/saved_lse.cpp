#include "schedule/saved_lse.h"

#include "codegen/lower_attention.h"
#include "codegen/lower_attention_training_coop.h"
#include "schedule/partner_outputs.h"

namespace mn::schedule {
namespace {

// The attention's kernel, lowered as the plan would, stores the log-sum-exp `lse` of the scores
// the backward kernels recompute: the tensor-core forward only where attention_lse would run on
// the bf16 training kernels (it then rounds its operands to bf16 as they do; against the f32
// training kernels' scores its own would be off).
bool kernel_saves_lse(const Graph& g, const Node& n, const Node& lse,
                      const codegen::DeviceTraits& device) {
  const std::vector<TensorType> types = node_input_types(g, n),
                                lse_types = node_input_types(g, lse);
  const codegen::LowerContext ctx{n, types, device}, lse_ctx{lse, lse_types, device};
  if (!codegen::attention_lowering::saves_lse(ctx)) return false;
  if (!codegen::attention_lowering::forward_on_tensor_cores(ctx)) return true;
  return device.fused_attention_outputs && codegen::attention_training::takes_coop_training(
                                               lse_ctx, codegen::attention_training::Form::lse);
}

// The same value: one node, or nodes of the same op, attributes and type over the same values
// (`depth` levels down): a backward pass's recomputed copy of a forward rotation
// (schedule/rematerialize.h) reads as the rotation it copies.
bool same_value(const Graph& g, NodeId a, NodeId b, int depth = 6) {
  if (a == b) return true;
  const Node& x = g.node(a);
  const Node& y = g.node(b);
  if (depth == 0 || x.inputs.empty() || x.op != y.op || !(x.attrs == y.attrs) ||
      !(x.type == y.type) || x.inputs.size() != y.inputs.size()) {
    return false;
  }
  for (size_t i = 0; i < x.inputs.size(); ++i) {
    if (!same_value(g, x.inputs[i], y.inputs[i], depth - 1)) return false;
  }
  return true;
}

// The attention_lse of the attention's own q, k (and mask) and attributes.
bool same_scores(const Graph& g, const Node& attention, const Node& lse) {
  if (attention.attrs != lse.attrs || attention.inputs.size() != lse.inputs.size() + 1)
    return false;
  // attention: q, k, v[, mask]; attention_lse: q, k[, mask].
  for (size_t i = 0, j = 0; i < attention.inputs.size(); ++i) {
    if (i == 2) continue;
    if (!same_value(g, attention.inputs[i], lse.inputs[j++])) return false;
  }
  return true;
}

}  // namespace

void save_lse_in_forward(const Graph& g, std::vector<KernelGroup>& groups,
                         const codegen::DeviceTraits& device) {
  absorb_partners(g, groups,
                  {"scaled_dot_product_attention", "attention_lse",
                   [&](const Node& attention, const Node& lse) {
                     return same_scores(g, attention, lse) &&
                            kernel_saves_lse(g, attention, lse, device);
                   },
                   &KernelGroup::saves_lse});
}

}  // namespace mn::schedule
