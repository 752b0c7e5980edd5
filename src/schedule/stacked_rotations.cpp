#include "schedule/stacked_rotations.h"

#include <map>

namespace mn::schedule {
namespace {

// A rotation kernel of its own with one output.
bool lone_rotation(const Graph& g, const KernelGroup& k) {
  if (k.kind != KernelGroup::Kind::single || k.outputs.size() != 1 || !without_extras(k) ||
      k.stacked_rotation.node >= 0 || !k.stored_permuted.empty()) {
    return false;
  }
  const std::string_view op = g.node(k.nodes.front()).op_name();
  return op == "rope_positions" || op == "rope_positions_backward";
}

}  // namespace

void stack_rotations(const Graph& g, std::vector<KernelGroup>& groups) {
  const std::map<NodeId, int> producer = group_producers(groups);
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& first = groups[i];
    if (dropped[i] || !lone_rotation(g, first)) continue;
    const Node& r = g.node(first.nodes.front());
    for (size_t j = i + 1; j < groups.size(); ++j) {
      const KernelGroup& other = groups[j];
      if (dropped[j] || !lone_rotation(g, other)) continue;
      const Node& u = g.node(other.nodes.front());
      if (u.op_name() != r.op_name() || u.attrs != r.attrs || other.inputs[1] != first.inputs[1] ||
          u.type.shape.back() != r.type.shape.back()) {
        continue;
      }
      const auto made = producer.find(other.inputs[0]);
      if (made != producer.end() && made->second >= static_cast<int>(i)) continue;
      first.stacked_rotation = {other.nodes.front(), static_cast<int>(first.inputs.size()),
                                other.load_perm, other.store_perm};
      first.inputs.push_back(other.inputs[0]);
      first.nodes.insert(first.nodes.end(), other.nodes.begin(), other.nodes.end());
      first.outputs.push_back(other.outputs.front());
      dropped[j] = 1;
      break;
    }
  }
  size_t k = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[k++] != 0; });
}

}  // namespace mn::schedule
