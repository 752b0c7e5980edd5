#include "schedule/rope_fusion.h"

#include <map>
#include <set>

#include "codegen/rope_load.h"
#include "ir/ops/attention.h"

namespace mn::schedule {

namespace {

// The operand a kernel of `op` can read rotated: cache_write's update, cached_attention's query.
int rotatable_operand(std::string_view op) {
  if (op == "cache_write") return 1;
  if (op == "cached_attention") return 0;
  return -1;
}

bool lowering_takes_rope(const Graph& g, const KernelGroup& group, const codegen::RopeLoad& rope,
                         const codegen::DeviceTraits& device) {
  std::vector<TensorType> types;
  for (NodeId in : group.inputs) types.push_back(g.node(in).type);
  const codegen::LowerContext ctx{g.node(group.nodes.front()), types, device, false, true, &rope};
  return codegen::takes_rope_load(ctx);
}

}  // namespace

void fuse_rope_loads(const Graph& g, std::vector<KernelGroup>& groups,
                     const codegen::DeviceTraits& device) {
  std::map<NodeId, int> readers = group_readers(groups);
  const std::set<NodeId> sinks = kept_values(g);
  // Each rope's operands as its kernel binds them: x may be a 16-bit tensor read widened in
  // place of the graph's cast (widened_loads.h), whose own kernel is then gone.
  std::map<NodeId, std::vector<NodeId>> ropes;
  for (const KernelGroup& k : groups) {
    const NodeId v = k.nodes.front();
    if (k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 &&
        g.node(v).op_name() == "rope_positions") {
      ropes.emplace(v, k.inputs);
    }
  }
  bool fused = false;
  for (KernelGroup& group : groups) {
    if (group.kind != KernelGroup::Kind::single || group.rope.node >= 0) continue;
    const int operand = rotatable_operand(g.node(group.nodes.front()).op_name());
    if (operand < 0) continue;
    const NodeId v = group.inputs[static_cast<size_t>(operand)];
    if (!ropes.count(v) || readers[v] != 1 || sinks.count(v)) continue;
    const Node& rope = g.node(v);
    const std::vector<NodeId>& rope_inputs = ropes.at(v);
    KernelGroup candidate = group;
    candidate.inputs[static_cast<size_t>(operand)] = rope_inputs.at(0);
    candidate.rope = {v, operand, static_cast<int>(candidate.inputs.size())};
    candidate.inputs.push_back(rope_inputs.at(1));
    const codegen::RopeLoad load{rope.attrs.as<RopePositionsAttrs>(), operand,
                                 candidate.rope.positions_input};
    if (!lowering_takes_rope(g, candidate, load, device)) continue;
    group = std::move(candidate);
    fused = true;
  }
  if (fused) {
    drop_unread_groups(g, groups, [&](NodeId v) { return ropes.count(v) > 0; });
  }
}

}  // namespace mn::schedule
