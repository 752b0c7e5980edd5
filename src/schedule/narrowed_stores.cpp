#include "schedule/narrowed_stores.h"

#include <algorithm>
#include <set>

#include "codegen/store_rewrites.h"
#include "codegen/widened_operands.h"
#include "ir/op_def.h"

namespace mn::schedule {
namespace {

// A plain single group: one node, its own lowering, nothing read or stored beside it.
bool plain_single(const KernelGroup& k) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 && k.outputs.size() == 1 &&
         without_extras(k);
}

// Whether `node`'s kernel may store its value cast to `cast`'s dtype in place of the cast's
// kernel: a computed f32 result rounded to 16 bits as the cast rounds it, or a converting copy
// of a 16-bit tensor widened (exact either way) for readers that could not read it widened
// themselves (a rotation reads the 16-bit copy, and may then read through the copy too; where
// all can, schedule/widened_loads.h binds the 16-bit tensor for them instead).
bool stores_cast(const Graph& g, const Node& node, NodeId cast,
                 const std::vector<std::vector<NodeId>>& consumers,
                 const codegen::DeviceTraits* device) {
  const DType from = node.type.dtype, to = g.node(cast).type.dtype;
  if (from == DType::f32 && is_half_float(to)) return true;
  return codegen::converting_copy(node) && is_half_float(from) && to == DType::f32 &&
         !read_widened_by_all(g, cast, consumers[static_cast<size_t>(cast)], device);
}

}  // namespace

void narrow_stores(const Graph& g, std::vector<KernelGroup>& groups,
                   const codegen::DeviceTraits* device) {
  const std::vector<char> needed = needed_nodes(g);
  const std::vector<std::vector<NodeId>> consumers = needed_consumers(g, needed);
  const std::set<NodeId> kept = kept_values(g);
  std::vector<int> group_of(g.size(), -1);
  for (size_t i = 0; i < groups.size(); ++i) {
    if (plain_single(groups[i]))
      group_of[static_cast<size_t>(groups[i].nodes.front())] = static_cast<int>(i);
  }
  std::vector<char> dropped(groups.size(), 0);
  for (KernelGroup& k : groups) {
    if (!plain_single(k)) continue;
    const NodeId x = k.nodes.front();
    const Node& node = g.node(x);
    if (kept.count(x) || !codegen::stores_narrowed_result(node)) continue;
    const auto& readers = consumers[static_cast<size_t>(x)];
    if (readers.size() != 1) continue;
    const NodeId c = readers.front();
    const Node& cast = g.node(c);
    const int cg = group_of[static_cast<size_t>(c)];
    if (cast.op_name() != "cast" || cg < 0 || dropped[static_cast<size_t>(cg)] ||
        !stores_cast(g, node, c, consumers, device)) {
      continue;
    }
    k.nodes.push_back(c);
    k.outputs = {c};
    dropped[static_cast<size_t>(cg)] = 1;
  }
  size_t i = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[i++] != 0; });
}

void twin_stores(const Graph& g, std::vector<KernelGroup>& groups,
                 const codegen::DeviceTraits* device) {
  const std::vector<char> needed = needed_nodes(g);
  const std::vector<std::vector<NodeId>> consumers = needed_consumers(g, needed);
  std::vector<int> cast_group(g.size(), -1);
  for (size_t i = 0; i < groups.size(); ++i) {
    const KernelGroup& k = groups[i];
    if (plain_single(k) && g.node(k.nodes.front()).op_name() == "cast")
      cast_group[static_cast<size_t>(k.nodes.front())] = static_cast<int>(i);
  }
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& k = groups[i];
    // A single kernel of its own value (maybe loading or storing through a permute), or of two
    // stacked rotations (each output may take a twin).
    const size_t values = k.stacked_rotation.node >= 0 ? 2 : 1;
    if (dropped[i] || k.kind != KernelGroup::Kind::single || k.outputs.size() != values ||
        !without_extras(k) || !k.stored_permuted.empty()) {
      continue;
    }
    const Node& node = g.node(k.nodes.front());
    if (!codegen::stores_only_through_out_st(node) || (node.op && node.op->updates_input0_in_place))
      continue;
    for (size_t j = 0; j < values; ++j) {
      const NodeId out = k.outputs[j];
      const auto& readers = consumers[static_cast<size_t>(out)];
      if (readers.size() < 2) continue;  // a lone cast reader: narrow_stores' case
      for (NodeId c : readers) {
        const int cg = cast_group[static_cast<size_t>(c)];
        if (cg < 0 || dropped[static_cast<size_t>(cg)] || g.node(c).inputs.front() != out) continue;
        // Narrowing: rounded as the cast rounds the stored f32. Widening: exact only where the
        // kernel stores 16-bit values it loaded (a copy of a tensor of its own dtype, not one
        // narrowing an f32 operand as it stores), and worth it only for a reader that cannot
        // widen the 16-bit tensor itself.
        const DType from = g.node(out).type.dtype, to = g.node(c).type.dtype;
        const bool narrowing = from == DType::f32 && is_half_float(to);
        const bool widening = codegen::converting_copy(node) && is_half_float(from) &&
                              g.node(k.inputs.front()).type.dtype == from && to == DType::f32 &&
                              !read_widened_by_all(g, c, consumers[static_cast<size_t>(c)], device);
        if (!narrowing && !widening) continue;
        k.nodes.push_back(c);
        k.outputs.push_back(c);
        dropped[static_cast<size_t>(cg)] = 1;
        break;
      }
    }
  }
  size_t i = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[i++] != 0; });
}

std::vector<std::pair<int, int>> twin_outputs(const Graph& g, const KernelGroup& group) {
  std::vector<std::pair<int, int>> twins;
  if (group.kind != KernelGroup::Kind::single) return twins;
  for (size_t j = 1; j < group.outputs.size(); ++j) {
    const Node& c = g.node(group.outputs[j]);
    if (c.op_name() != "cast") continue;
    for (size_t i = 0; i < j; ++i) {
      if (c.inputs.front() == group.outputs[i]) {
        twins.emplace_back(static_cast<int>(i), static_cast<int>(j));
        break;
      }
    }
  }
  return twins;
}

Node stored_node(const Graph& g, const KernelGroup& group) {
  Node n = g.node(group.nodes.front());
  if (group.kind == KernelGroup::Kind::single && !group.outputs.empty()) {
    n.type.dtype = g.node(group.outputs.front()).type.dtype;
  }
  return n;
}

}  // namespace mn::schedule
