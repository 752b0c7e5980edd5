#include "ir/graph_rewrite.h"

#include <string_view>
#include <vector>

#include <meganeura/error.h>

#include "ir/op_def.h"

namespace mn {

Tensor copy_leaf(Graph& out, const Node& n) {
  const std::string_view op = n.op_name();
  if (op == "input") return out.input(n.name, n.type.shape, n.type.dtype);
  if (op == "parameter") {
    return out.parameter(n.name, n.type.shape, n.attrs.as<ParameterAttrs>().init, n.type.dtype);
  }
  if (op == "state") {
    return out.state(n.name, n.type.shape, n.attrs.as<StateAttrs>().init, n.type.dtype);
  }
  if (op == "constant") return out.constant(*n.attrs.as<ConstantAttrs>().value.array);
  return {};
}

Graph rewrite_graph(const Graph& g, const NodeRewrite& rewrite) {
  Graph out;
  std::vector<Tensor> map(g.size());
  std::vector<Tensor> operands;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (Tensor leaf = copy_leaf(out, n); leaf.valid()) {
      map[i] = leaf;
      continue;
    }
    operands.clear();
    for (NodeId in : n.inputs) operands.push_back(map[in]);
    Tensor t = rewrite(out, n, operands);
    if (!t.valid()) {
      std::vector<NodeId> ids;
      for (const Tensor& o : operands) ids.push_back(o.id());
      t = out.apply(*n.op, n.attrs, ids);
    } else if (t.type() != n.type) {
      throw Error("rewrite of '" + n.op->name + "' changed its type from " + n.type.str() + " to " +
                  t.type().str());
    }
    map[i] = t;
  }
  for (const auto& [name, id] : g.outputs()) out.output(name, map[id]);
  for (const auto& [target, value] : g.assignments()) out.assign(map[target], map[value]);
  return out;
}

Graph copy_graph(const Graph& g) {
  return rewrite_graph(g, [](Graph&, const Node&, std::span<const Tensor>) { return Tensor{}; });
}

}  // namespace mn
