#include "schedule/saved_lse.h"

#include <map>

#include "codegen/lower_attention.h"
#include "codegen/lower_attention_training_coop.h"

namespace mn::schedule {
namespace {

// A kernel of its own for one node of `op` with one output.
bool lone(const Graph& g, const KernelGroup& k, std::string_view op) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 && k.outputs.size() == 1 &&
         without_extras(k) && g.node(k.nodes.front()).op_name() == op;
}

std::vector<TensorType> input_types(const Graph& g, const Node& n) {
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  return types;
}

// The attention's kernel, lowered as the plan would, stores the log-sum-exp `lse` of the scores
// the backward kernels recompute: the tensor-core forward only where attention_lse would run on
// the bf16 training kernels (it then rounds its operands to bf16 as they do; against the f32
// training kernels' scores its own would be off).
bool kernel_saves_lse(const Graph& g, const KernelGroup& k, const Node& lse,
                      const codegen::DeviceTraits& device) {
  const Node& n = g.node(k.nodes.front());
  const std::vector<TensorType> types = input_types(g, n), lse_types = input_types(g, lse);
  const codegen::LowerContext ctx{n, types, device}, lse_ctx{lse, lse_types, device};
  if (!codegen::attention_lowering::saves_lse(ctx)) return false;
  return !codegen::attention_lowering::forward_on_tensor_cores(ctx) ||
         codegen::attention_training::takes_coop_training(lse_ctx,
                                                          codegen::attention_training::Form::lse);
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
  // Per value, the first group reading it.
  std::map<NodeId, size_t> first_reader;
  for (size_t i = 0; i < groups.size(); ++i) {
    for (NodeId in : groups[i].inputs) first_reader.try_emplace(in, i);
  }
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& attention = groups[i];
    if (!lone(g, attention, "scaled_dot_product_attention")) continue;
    const Node& a = g.node(attention.nodes.front());
    for (size_t j = 0; j < groups.size(); ++j) {
      const KernelGroup& lse = groups[j];
      if (dropped[j] || j == i || !lone(g, lse, "attention_lse") || !lse.stored_permuted.empty() ||
          !same_scores(g, a, g.node(lse.nodes.front())) ||
          !kernel_saves_lse(g, attention, g.node(lse.nodes.front()), device)) {
        continue;
      }
      const auto reader = first_reader.find(lse.outputs.front());
      if (reader != first_reader.end() && reader->second <= i) continue;
      attention.nodes.push_back(lse.nodes.front());
      attention.outputs.push_back(lse.outputs.front());
      attention.saves_lse = true;
      dropped[j] = 1;
      break;
    }
  }
  size_t k = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[k++] != 0; });
}

}  // namespace mn::schedule
