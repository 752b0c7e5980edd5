#include "schedule/reduction_operands.h"

#include <algorithm>
#include <set>
#include <vector>

#include "codegen/fused_reduce.h"
#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "schedule/fusion.h"

namespace mn::schedule {

namespace {

struct Analysis {
  const Graph& g;
  const ReductionOperandOptions& options;
  std::vector<char> needed, sink, forward;
  std::vector<std::vector<NodeId>> consumers;

  Analysis(const Graph& graph, const ReductionOperandOptions& o) : g(graph), options(o) {
    const size_t n = g.size();
    needed = needed_nodes(g);
    forward = forward_nodes(g);
    sink.assign(n, 0);
    for (const auto& [name, id] : g.outputs()) sink[id] = 1;
    for (const auto& [target, value] : g.assignments()) sink[value] = 1;
    consumers = needed_consumers(g, needed);
  }

  // The pointwise DAG computing reduction `r`'s operand, in topological order, when other
  // kernels read part of it and a private copy fits one reduction kernel; empty otherwise.
  std::vector<NodeId> private_dag(NodeId r) const {
    const Node& red = g.node(r);
    if (red.inputs.size() != 1) return {};
    const NodeId p = red.inputs.front();
    const Node& operand = g.node(p);
    if (operand.type.numel() < options.min_elements) return {};
    if (!codegen::reduce_accepts_fusion(red, std::vector<TensorType>{operand.type})) return {};
    std::set<NodeId> dag;
    std::vector<NodeId> stack{p};
    while (!stack.empty()) {
      const NodeId v = stack.back();
      stack.pop_back();
      if (dag.count(v)) continue;
      const Node& node = g.node(v);
      // A backward reduction copies backward values only: the forward values it reads are
      // kept for it anyway (or recomputed by schedule/rematerialize.h, which decides that).
      const bool inside = !sink[v] && forward[v] == forward[r] && fusable_node(g, v) &&
                          broadcasts_to(node.type.shape, operand.type.shape);
      if (!inside) {
        if (v == p) return {};
        continue;
      }
      dag.insert(v);
      if (dag.size() > options.max_nodes) return {};
      for (NodeId in : node.inputs) stack.push_back(in);
    }
    bool shared = false;
    std::set<NodeId> leaves;
    for (NodeId v : dag) {
      for (NodeId c : consumers[v]) shared = shared || (c != r && !dag.count(c));
      for (NodeId in : g.node(v).inputs) {
        if (!dag.count(in) && !is_scalar_constant(g.node(in))) leaves.insert(in);
      }
    }
    // The kernel binds the leaves, the first again, and its output (or partials).
    if (!shared || leaves.size() + 2 > options.max_bindings) return {};
    return {dag.begin(), dag.end()};  // ids ascend in topological order
  }
};

}  // namespace

std::optional<Graph> private_reduction_operands(const Graph& lowered,
                                                const ReductionOperandOptions& options) {
  const Analysis a(lowered, options);
  const size_t n = lowered.size();
  std::vector<std::vector<NodeId>> dags(n);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (!a.needed[i]) continue;
    dags[i] = a.private_dag(static_cast<NodeId>(i));
    any = any || !dags[i].empty();
  }
  if (!any) return std::nullopt;
  std::vector<Tensor> mapped(n);  // each node's value in the new graph, as its readers see it
  size_t cursor = 0;              // the callback sees the non-leaf nodes in order
  return rewrite_graph(lowered, [&](Graph& out, const Node& node,
                                    std::span<const Tensor> operands) -> Tensor {
    while (&lowered.node(static_cast<NodeId>(cursor)) != &node) ++cursor;
    for (size_t k = 0; k < node.inputs.size(); ++k) mapped[node.inputs[k]] = operands[k];
    const std::vector<NodeId>& dag = dags[cursor];
    if (dag.empty()) return {};
    std::vector<Tensor> copy(n);
    auto value = [&](NodeId v) { return copy[v].valid() ? copy[v] : mapped[v]; };
    for (NodeId v : dag) {
      const Node& d = lowered.node(v);
      std::vector<Tensor> ins;
      for (NodeId in : d.inputs) ins.push_back(value(in));
      copy[v] = out.apply(d.op_name(), d.attrs, ins);
    }
    return out.apply(node.op_name(), node.attrs, {copy[node.inputs.front()]});
  });
}

}  // namespace mn::schedule
