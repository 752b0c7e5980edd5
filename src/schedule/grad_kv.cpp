#include "schedule/grad_kv.h"

#include "codegen/lower_attention_training_coop.h"
#include "schedule/partner_outputs.h"

namespace mn::schedule {
namespace {

// attention_grad_v of attention_grad_k's own scores: grad_k reads q, k, v, dout, lse, delta
// [, mask], grad_v q, k, dout, lse [, mask], with the same attributes.
bool same_scores(const Node& grad_k, const Node& grad_v) {
  if (grad_k.attrs != grad_v.attrs || grad_k.inputs.size() != grad_v.inputs.size() + 2) {
    return false;
  }
  const auto& a = grad_k.inputs;
  const auto& b = grad_v.inputs;
  if (a[0] != b[0] || a[1] != b[1] || a[3] != b[2] || a[4] != b[3]) return false;
  return a.size() == 6 || a[6] == b[4];
}

// The tensor-core kernel takes dK with dV beside it, lowered as the plan would.
bool kernel_takes_pair(const Graph& g, const Node& n, const Node& grad_v,
                       const codegen::DeviceTraits& device) {
  const std::vector<TensorType> types = node_input_types(g, n);
  codegen::LowerContext ctx{n, types, device};
  ctx.grad_v_output = grad_v.type.dtype;
  return codegen::attention_training::takes_grad_kv(ctx);
}

}  // namespace

void compute_grad_v_with_grad_k(const Graph& g, std::vector<KernelGroup>& groups,
                                const codegen::DeviceTraits& device) {
  if (!device.fused_attention_outputs) return;
  absorb_partners(g, groups,
                  {"attention_grad_k", "attention_grad_v",
                   [&](const Node& grad_k, const Node& grad_v) {
                     return same_scores(grad_k, grad_v) &&
                            kernel_takes_pair(g, grad_k, grad_v, device);
                   },
                   &KernelGroup::computes_grad_v});
}

}  // namespace mn::schedule
