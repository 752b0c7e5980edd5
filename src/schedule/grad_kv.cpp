#include "schedule/grad_kv.h"

#include <map>

#include "codegen/lower_attention_training_coop.h"

namespace mn::schedule {
namespace {

// A kernel of its own for one node of `op` with one output.
bool lone(const Graph& g, const KernelGroup& k, std::string_view op) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 && k.outputs.size() == 1 &&
         without_extras(k) && k.stored_permuted.empty() && g.node(k.nodes.front()).op_name() == op;
}

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
bool kernel_takes_pair(const Graph& g, const KernelGroup& grad_k, const Node& grad_v,
                       const codegen::DeviceTraits& device) {
  const Node& n = g.node(grad_k.nodes.front());
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  codegen::LowerContext ctx{n, types, device};
  ctx.grad_v_output = grad_v.type.dtype;
  return codegen::attention_training::takes_grad_kv(ctx);
}

}  // namespace

void compute_grad_v_with_grad_k(const Graph& g, std::vector<KernelGroup>& groups,
                                const codegen::DeviceTraits& device) {
  // Per value, the first group reading it.
  std::map<NodeId, size_t> first_reader;
  for (size_t i = 0; i < groups.size(); ++i) {
    for (NodeId in : groups[i].inputs) first_reader.try_emplace(in, i);
  }
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& grad_k = groups[i];
    if (dropped[i] || !lone(g, grad_k, "attention_grad_k")) continue;
    const Node& a = g.node(grad_k.nodes.front());
    for (size_t j = 0; j < groups.size(); ++j) {
      const KernelGroup& grad_v = groups[j];
      if (dropped[j] || j == i || !lone(g, grad_v, "attention_grad_v")) continue;
      const Node& v = g.node(grad_v.nodes.front());
      if (!same_scores(a, v) || !kernel_takes_pair(g, grad_k, v, device)) continue;
      // dV is computed at grad_k's place: nothing before it may read dV.
      const auto reader = first_reader.find(grad_v.outputs.front());
      if (reader != first_reader.end() && reader->second <= i) continue;
      grad_k.nodes.push_back(grad_v.nodes.front());
      grad_k.outputs.push_back(grad_v.outputs.front());
      grad_k.computes_grad_v = true;
      dropped[j] = 1;
      break;
    }
  }
  size_t k = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[k++] != 0; });
}

}  // namespace mn::schedule
