#include "schedule/widened_loads.h"

#include <algorithm>

#include "codegen/widened_operands.h"

namespace mn::schedule {

NodeId widened_source(const Graph& g, NodeId id) {
  const Node& c = g.node(id);
  if (c.op_name() != "cast" || c.type.dtype != DType::f32 || c.inputs.size() != 1) return -1;
  const DType from = g.node(c.inputs[0]).type.dtype;
  return from == DType::f16 || from == DType::bf16 ? c.inputs[0] : -1;
}

namespace {

// The node whose lowering binds the group's inputs 0..k: a single group's node, or the matmul
// of an epilogue group; nullptr for groups whose kernels are generated from several nodes.
const Node* binding_node(const Graph& g, const KernelGroup& group) {
  if (group.kind == KernelGroup::Kind::single) return &g.node(group.nodes.front());
  if (group.kind == KernelGroup::Kind::matmul_epilogue) return &g.node(group.anchor);
  return nullptr;
}

// An epilogue step reads `id` (it would then need the f32 value under the same binding).
bool epilogue_reads(const Graph& g, const KernelGroup& group, NodeId id) {
  if (group.kind != KernelGroup::Kind::matmul_epilogue) return false;
  return std::any_of(group.segments.front().nodes.begin(), group.segments.front().nodes.end(),
                     [&](NodeId v) {
                       const auto& in = g.node(v).inputs;
                       return std::find(in.begin(), in.end(), id) != in.end();
                     });
}

void substitute_operands(const Graph& g, KernelGroup& group, const codegen::DeviceTraits& device) {
  const Node* node = binding_node(g, group);
  if (!node) return;
  std::vector<TensorType> types;
  for (NodeId in : node->inputs) types.push_back(g.node(in).type);
  for (size_t i = 0; i < node->inputs.size(); ++i) {
    const NodeId cast = group.inputs[i];
    const NodeId source = widened_source(g, cast);
    if (source < 0 || epilogue_reads(g, group, cast)) continue;
    const DType narrow = g.node(source).type.dtype;
    const codegen::LowerContext ctx{*node, types, device};
    if (!codegen::reads_widened_operand(ctx, static_cast<int>(i), narrow)) continue;
    // Every use of the cast among the node's operands (matmul(x, x) reads it twice).
    for (size_t j = i; j < node->inputs.size(); ++j) {
      if (group.inputs[j] != cast) continue;
      group.inputs[j] = source;
      types[j].dtype = narrow;
    }
  }
}

}  // namespace

void absorb_widening_casts(const Graph& g, std::vector<KernelGroup>& groups,
                           const codegen::DeviceTraits& device) {
  for (KernelGroup& group : groups) substitute_operands(g, group, device);
  drop_unread_groups(g, groups, [&](NodeId v) { return widened_source(g, v) >= 0; });
}

}  // namespace mn::schedule
