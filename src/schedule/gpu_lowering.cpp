#include "schedule/gpu_lowering.h"

#include "codegen/kernel.h"
#include "ir/op_def.h"
#include "schedule/lowering.h"

namespace mn::schedule {

bool has_gpu_lowering(std::string_view op) {
  if (codegen::find_lowering(op)) return true;
  const OpDef* d = find_op_def(op);
  return d && d->decompose;  // runs as its decomposition
}

Graph rewrite_graph(const Graph& g, const NodeRewrite& rewrite) {
  Graph out;
  std::vector<Tensor> map(g.size());
  std::vector<Tensor> operands;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    const std::string_view op = n.op_name();
    if (op == "input") {
      map[i] = out.input(n.name, n.type.shape, n.type.dtype);
    } else if (op == "parameter") {
      map[i] = out.parameter(n.name, n.type.shape, n.attrs.as<ParameterAttrs>().init, n.type.dtype);
    } else if (op == "state") {
      map[i] = out.state(n.name, n.type.shape, n.attrs.as<StateAttrs>().init, n.type.dtype);
    } else if (op == "constant") {
      map[i] = out.constant(*n.attrs.as<ConstantAttrs>().value.array);
    } else {
      operands.clear();
      for (NodeId in : n.inputs) operands.push_back(map[in]);
      Tensor t = rewrite(out, n, operands);
      if (!t.valid()) {
        std::vector<NodeId> ids;
        for (const Tensor& o : operands) ids.push_back(o.id());
        t = out.apply(*n.op, n.attrs, ids);
      } else if (t.type() != n.type) {
        throw Error("rewrite of '" + n.op->name + "' changed its type from " + n.type.str() +
                    " to " + t.type().str());
      }
      map[i] = t;
    }
  }
  for (const auto& [name, id] : g.outputs()) out.output(name, map[id]);
  for (const auto& [target, value] : g.assignments()) out.assign(map[target], map[value]);
  return out;
}

Graph lower_for_gpu(const Graph& g) {
  // Each pass expands one level of composites; decompositions may produce other composites.
  constexpr int kMaxPasses = 8;
  bool expanded = true;
  Graph current =
      rewrite_graph(g, [](Graph&, const Node&, std::span<const Tensor>) { return Tensor{}; });
  for (int pass = 0; pass < kMaxPasses && expanded; ++pass) {
    expanded = false;
    current = rewrite_graph(current, [&](Graph&, const Node& n, std::span<const Tensor> operands) {
      if (codegen::find_lowering(n.op_name())) return Tensor{};
      if (!n.op->decompose) {
        throw Error("op '" + n.op->name + "' has no GPU kernel and no decomposition");
      }
      expanded = true;
      return n.op->decompose(n, operands);
    });
  }
  if (expanded) throw Error("lower_for_gpu: decompositions did not settle after 8 passes");
  return current;
}

}  // namespace mn::schedule
