#include "schedule/saved_lse.h"

#include <map>

#include "codegen/lower_attention.h"

namespace mn::schedule {
namespace {

// A kernel of its own for one node of `op` with one output.
bool lone(const Graph& g, const KernelGroup& k, std::string_view op) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 && k.outputs.size() == 1 &&
         without_extras(k) && g.node(k.nodes.front()).op_name() == op;
}

// The attention's kernel, lowered as the plan would, stores the log-sum-exp.
bool kernel_saves_lse(const Graph& g, const KernelGroup& k, const codegen::DeviceTraits& device) {
  const Node& n = g.node(k.nodes.front());
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  return codegen::attention_lowering::saves_lse(codegen::LowerContext{n, types, device});
}

// The attention_lse of the attention's own q, k (and mask) and attributes.
bool same_scores(const Node& attention, const Node& lse) {
  if (attention.attrs != lse.attrs || attention.inputs.size() != lse.inputs.size() + 1)
    return false;
  // attention: q, k, v[, mask]; attention_lse: q, k[, mask].
  for (size_t i = 0, j = 0; i < attention.inputs.size(); ++i) {
    if (i == 2) continue;
    if (attention.inputs[i] != lse.inputs[j++]) return false;
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
    if (!lone(g, attention, "scaled_dot_product_attention") ||
        !kernel_saves_lse(g, attention, device)) {
      continue;
    }
    const Node& a = g.node(attention.nodes.front());
    for (size_t j = 0; j < groups.size(); ++j) {
      const KernelGroup& lse = groups[j];
      if (dropped[j] || j == i || !lone(g, lse, "attention_lse") || !lse.stored_permuted.empty() ||
          !same_scores(a, g.node(lse.nodes.front()))) {
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
