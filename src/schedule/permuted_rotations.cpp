#include "schedule/permuted_rotations.h"

#include <map>
#include <set>

#include "ir/ops/shape.h"

namespace mn::schedule {
namespace {

bool is_rotation(const Node& n) {
  return n.op_name() == "rope_positions" || n.op_name() == "rope_positions_backward";
}

// A single group of one permute and nothing else.
bool lone_permute(const Graph& g, const KernelGroup& k) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 &&
         g.node(k.nodes.front()).op_name() == "permute";
}

// The permute's permutation (axes resolved) when it keeps the last axis last, else empty.
std::vector<int64_t> keeping_last_axis(const Graph& g, NodeId permute) {
  const Node& p = g.node(permute);
  const TensorType in = g.node(p.inputs.front()).type;
  std::vector<int64_t> perm = ops::shape_detail::resolve_perm(
      "permute", std::span<const TensorType>(&in, 1), p.attrs.as<PermuteAttrs>().perm);
  if (perm.empty() || perm.back() != static_cast<int64_t>(perm.size()) - 1) return {};
  return perm;
}

}  // namespace

void fold_permutes_into_rotations(const Graph& g, std::vector<KernelGroup>& groups) {
  std::map<NodeId, int> readers = group_readers(groups);
  const std::set<NodeId> sinks = kept_values(g);
  // Lone permutes by the value they compute, and by the value they read as it is.
  std::map<NodeId, size_t> permute_group, permute_of;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!lone_permute(g, groups[i])) continue;
    const NodeId p = groups[i].nodes.front();
    permute_group.emplace(p, i);
    if (groups[i].inputs.at(0) == g.node(p).inputs.front())
      permute_of.emplace(g.node(p).inputs.front(), i);
  }
  std::vector<char> dropped(groups.size(), 0);
  auto only_reader = [&](NodeId v) { return readers[v] == 1 && !sinks.count(v); };
  for (KernelGroup& k : groups) {
    if (k.kind != KernelGroup::Kind::single || !is_rotation(g.node(k.nodes.front())) ||
        k.rope.node >= 0 || !k.load_perm.empty() || !k.store_perm.empty()) {
      continue;
    }
    // The operand: a lone permute read by this rotation alone.
    if (auto it = permute_group.find(k.inputs.at(0));
        it != permute_group.end() && !dropped[it->second] && only_reader(it->first)) {
      std::vector<int64_t> perm = keeping_last_axis(g, it->first);
      if (!perm.empty()) {
        k.inputs[0] = groups[it->second].inputs.at(0);
        k.load_perm = std::move(perm);
        dropped[it->second] = 1;
      }
    }
    // The result: read by one lone permute alone, which reads it as it is.
    const NodeId out = k.outputs.at(0);
    const auto it = permute_of.find(out);
    if (!only_reader(out) || it == permute_of.end() || dropped[it->second]) continue;
    const NodeId value = groups[it->second].nodes.front();
    std::vector<int64_t> perm = keeping_last_axis(g, value);
    if (perm.empty()) continue;
    k.nodes.push_back(value);
    k.outputs = {value};
    k.store_perm = std::move(perm);
    dropped[it->second] = 1;
  }
  size_t i = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[i++] != 0; });
}

}  // namespace mn::schedule
