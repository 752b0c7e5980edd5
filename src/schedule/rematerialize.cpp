#include "schedule/rematerialize.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "schedule/fusion.h"

namespace mn::schedule {

namespace {

struct Analysis {
  std::vector<char> forward;          // the outputs depend on it
  std::vector<char> backward_reader;  // a needed node outside the forward pass reads it
  std::vector<char> recompute;        // its backward readers read a copy
};

Analysis analyse(const Graph& g, const RematerializeOptions& options) {
  const size_t n = g.size();
  const std::vector<char> needed = needed_nodes(g);
  Analysis a{forward_nodes(g), std::vector<char>(n, 0), std::vector<char>(n, 0)};
  for (size_t i = 0; i < n; ++i) {
    if (!needed[i] || a.forward[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) a.backward_reader[in] = 1;
  }
  // In topological order, so that a node's inputs are decided first. A value the backward
  // pass does not read is decided too: it may lie between kept values and one it reads (a
  // normalization's affine before a ReLU), and is then recomputed as part of that one's copy.
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.node(static_cast<NodeId>(i));
    if (!needed[i] || !a.forward[i]) continue;
    if (!node.op || node.op->archetype != Archetype::pointwise || node.inputs.empty()) continue;
    if (node.type.numel() < options.min_elements) continue;
    bool available = true;  // every input is there when the backward pass runs
    std::vector<NodeId> small_inputs;  // kept for the copy: a mean, a 1/σ per channel
    for (NodeId in : node.inputs) {
      const Node& src = g.node(in);
      const bool small = a.forward[in] && !is_source_op(src.op_name()) &&
                         src.type.numel() <= node.type.numel() / options.small_ratio;
      if (small && !a.backward_reader[in]) small_inputs.push_back(in);
      available = available && (is_source_op(src.op_name()) || a.recompute[in] ||
                                 (a.forward[in] && a.backward_reader[in]) || small);
    }
    if (available) {
      for (NodeId in : small_inputs) a.backward_reader[in] = 1;
    }
    // A value widened from a narrower one (a product's bf16 result cast to f32): keeping the
    // narrow input instead of it takes fewer bytes.
    const bool narrower_input = node.inputs.size() == 1 && a.forward[node.inputs[0]] &&
                                !is_source_op(g.node(node.inputs[0]).op_name()) &&
                                dtype_size(g.node(node.inputs[0]).type.dtype) <
                                    dtype_size(node.type.dtype) &&
                                g.node(node.inputs[0]).type.numel() == node.type.numel();
    if (!available && narrower_input) {
      available = true;
      a.backward_reader[node.inputs[0]] = 1;  // kept now, for the copy
    }
    a.recompute[i] = available;
  }
  return a;
}

}  // namespace

std::optional<Rematerialized> rematerialize(const Graph& lowered,
                                            const RematerializeOptions& options) {
  const Analysis a = analyse(lowered, options);
  bool any = false;  // a value the backward pass reads is recomputed
  for (size_t i = 0; i < a.recompute.size(); ++i) any = any || (a.recompute[i] && a.backward_reader[i]);
  if (!any) return std::nullopt;
  const size_t n = lowered.size();
  std::vector<std::vector<Tensor>> operands_of(n);  // of recomputed nodes, in the new graph
  std::vector<Tensor> copy(n);
  std::vector<NodeId> copy_ids;
  // The copy of recomputed node `id`, made when a backward node first reads it.
  std::function<Tensor(Graph&, NodeId)> copy_of = [&](Graph& out, NodeId id) {
    if (copy[id].valid()) return copy[id];
    const Node& node = lowered.node(id);
    std::vector<Tensor> ins;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const NodeId in = node.inputs[k];
      ins.push_back(a.recompute[in] ? copy_of(out, in) : operands_of[id][k]);
    }
    copy[id] = out.apply(node.op_name(), node.attrs, ins);
    copy_ids.push_back(copy[id].id());
    return copy[id];
  };
  size_t cursor = 0;  // the callback sees the non-leaf nodes in order
  Rematerialized r;
  r.graph = rewrite_graph(lowered, [&](Graph& out, const Node& node,
                                    std::span<const Tensor> operands) -> Tensor {
    while (&lowered.node(static_cast<NodeId>(cursor)) != &node) ++cursor;
    const auto id = static_cast<NodeId>(cursor);
    if (a.recompute[id]) {
      operands_of[id].assign(operands.begin(), operands.end());
      return {};
    }
    if (a.forward[id]) return {};
    bool reads_copy = false;
    for (NodeId in : node.inputs) reads_copy = reads_copy || a.recompute[in];
    if (!reads_copy) return {};
    std::vector<Tensor> ins(operands.begin(), operands.end());
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      if (a.recompute[node.inputs[k]]) ins[k] = copy_of(out, node.inputs[k]);
    }
    return out.apply(node.op_name(), node.attrs, ins);
  });
  r.copies.assign(r.graph.size(), 0);
  for (NodeId id : copy_ids) r.copies[static_cast<size_t>(id)] = 1;
  return r;
}

}  // namespace mn::schedule
