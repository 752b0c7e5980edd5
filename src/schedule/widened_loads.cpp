#include "schedule/widened_loads.h"

#include <algorithm>

#include "codegen/widened_operands.h"
#include "ir/op_def.h"

namespace mn::schedule {

NodeId widened_source(const Graph& g, NodeId id) {
  const Node& c = g.node(id);
  if (c.op_name() != "cast" || c.type.dtype != DType::f32 || c.inputs.size() != 1) return -1;
  const DType from = g.node(c.inputs[0]).type.dtype;
  return is_half_float(from) ? c.inputs[0] : -1;
}

namespace {

// The source of a cast between two float dtypes (either way), or -1.
NodeId converted_source(const Graph& g, NodeId id) {
  const Node& c = g.node(id);
  if (c.op_name() != "cast" || c.inputs.size() != 1 || !is_float(c.type.dtype)) return -1;
  return is_float(g.node(c.inputs[0]).type.dtype) ? c.inputs[0] : -1;
}

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

void substitute_operands(const Graph& g, KernelGroup& group, const codegen::DeviceTraits& device,
                         const std::vector<char>& stored) {
  const Node* node = binding_node(g, group);
  if (!node) return;
  std::vector<TensorType> types = node_input_types(g, *node);
  // A converting copy (permute) takes a narrowing cast too: it rounds as it stores.
  const bool copy = codegen::converting_copy(*node);
  for (size_t i = 0; i < node->inputs.size(); ++i) {
    const NodeId cast = group.inputs[i];
    const NodeId source = copy ? converted_source(g, cast) : widened_source(g, cast);
    if (source < 0 || !stored[static_cast<size_t>(source)] || epilogue_reads(g, group, cast)) {
      continue;
    }
    const DType narrow = g.node(source).type.dtype;
    const codegen::LowerContext ctx{*node, types, device};
    if (!copy && !codegen::reads_widened_operand(ctx, static_cast<int>(i), narrow)) continue;
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
  // Only a stored value can be read in a cast's place: not one a narrowed store
  // (narrowed_stores.h) keeps in registers.
  std::vector<char> stored(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i) {
    stored[i] = is_source_op(g.node(static_cast<NodeId>(i)).op_name());
  }
  for (const KernelGroup& group : groups) {
    for (NodeId o : group.outputs) stored[static_cast<size_t>(o)] = 1;
  }
  for (KernelGroup& group : groups) substitute_operands(g, group, device, stored);
  drop_unread_groups(g, groups, [&](NodeId v) { return converted_source(g, v) >= 0; });
}

}  // namespace mn::schedule
