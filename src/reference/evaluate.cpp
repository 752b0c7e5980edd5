#include <meganeura/reference.h>

#include <optional>

#include "ir/op_def.h"

namespace mn::reference {

namespace {

const Init& init_of(const Node& n) {
  return n.attrs.is<ParameterAttrs>() ? n.attrs.as<ParameterAttrs>().init
                                      : n.attrs.as<StateAttrs>().init;
}

const Array& checked_feed(const Node& n, const Feeds& feeds, std::optional<Array>& init_slot,
                          bool persistent) {
  auto it = feeds.find(n.name);
  if (it == feeds.end()) {
    if (!persistent) throw Error("evaluate: input '" + n.name + "' was not fed");
    init_slot = initialize(init_of(n), n.type.shape, n.type.dtype);
    return *init_slot;
  }
  const Array& a = it->second;
  if (a.shape != n.type.shape) {
    throw ShapeError("evaluate: '" + n.name + "' expects shape " + shape_str(n.type.shape) +
                     ", got " + shape_str(a.shape));
  }
  if (static_cast<int64_t>(a.data.size()) != n.type.numel()) {
    throw Error("evaluate: '" + n.name + "' has " + std::to_string(a.data.size()) +
                " values for shape " + shape_str(n.type.shape));
  }
  return a;
}

}  // namespace

std::vector<Array> evaluate_nodes(const Graph& g, const Feeds& feeds,
                                  std::span<const NodeId> targets) {
  const size_t n = g.size();
  for (const auto& [name, value] : feeds) {
    if (!g.find_input(name) && !g.find_persistent(name)) {
      throw Error("evaluate: '" + name + "' is not an input, parameter or state of the graph");
    }
  }
  // Which nodes are needed, and how many needed consumers each has (to free values early).
  std::vector<char> needed(n, 0);
  for (NodeId t : targets) {
    if (t < 0 || static_cast<size_t>(t) >= n)
      throw Error("evaluate: no node %" + std::to_string(t));
    needed[t] = 1;
  }
  std::vector<int> uses(n, 0);
  for (size_t i = n; i-- > 0;) {
    if (!needed[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) {
      needed[in] = 1;
      ++uses[in];
    }
  }
  for (NodeId t : targets) ++uses[t];  // targets stay alive

  std::vector<std::optional<Array>> values(n);
  std::vector<const Array*> operands;
  for (size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    const Node& node = g.node(static_cast<NodeId>(i));
    const std::string_view op = node.op_name();
    if (op == "input" || op == "parameter" || op == "state") {
      std::optional<Array> init;
      values[i] = checked_feed(node, feeds, init, op != "input");
      continue;
    }
    if (!node.op->eval) throw Error("evaluate: op '" + node.op->name + "' has no reference");
    operands.clear();
    for (NodeId in : node.inputs) operands.push_back(&*values[in]);
    Array out = node.op->eval(node, operands);
    if (out.shape != node.type.shape || out.dtype != node.type.dtype ||
        static_cast<int64_t>(out.data.size()) != node.type.numel()) {
      throw Error("evaluate: op '" + node.op->name + "' produced " + out.type().str() +
                  " but inferred " + node.type.str());
    }
    values[i] = std::move(out);
    for (NodeId in : node.inputs) {
      if (--uses[in] == 0) values[in].reset();
    }
  }
  std::vector<Array> result;
  result.reserve(targets.size());
  for (NodeId t : targets) result.push_back(*values[t]);
  return result;
}

std::map<std::string, Array> evaluate(const Graph& g, const Feeds& feeds) {
  std::vector<NodeId> ids;
  for (const auto& [name, id] : g.outputs()) ids.push_back(id);
  auto values = evaluate_nodes(g, feeds, ids);
  std::map<std::string, Array> out;
  for (size_t i = 0; i < ids.size(); ++i) out.emplace(g.outputs()[i].first, std::move(values[i]));
  return out;
}

Feeds initial_parameters(const Graph& g) {
  Feeds out;
  for (const auto* ids : {&g.parameters(), &g.states()}) {
    for (NodeId id : *ids) {
      const Node& n = g.node(id);
      out.emplace(n.name, initialize(init_of(n), n.type.shape, n.type.dtype));
    }
  }
  return out;
}

std::map<std::string, Array> run_step(const Graph& g, const Feeds& inputs, Feeds& persistent) {
  Feeds feeds = inputs;
  for (const auto& [name, value] : persistent) feeds.insert_or_assign(name, value);
  std::vector<NodeId> ids;
  for (const auto& [name, id] : g.outputs()) ids.push_back(id);
  for (const auto& [target, value] : g.assignments()) ids.push_back(value);
  auto values = evaluate_nodes(g, feeds, ids);
  std::map<std::string, Array> out;
  size_t k = 0;
  for (const auto& [name, id] : g.outputs()) out.emplace(name, std::move(values[k++]));
  // Persistent values not yet held (never fed) start from their initializers.
  for (const auto& [name, value] : initial_parameters(g)) persistent.try_emplace(name, value);
  for (const auto& [target, value] : g.assignments()) {
    Array v = std::move(values[k++]);
    for (double& x : v.data) x = round_to_dtype(x, v.dtype);  // stored at the target's precision
    persistent.insert_or_assign(g.node(target).name, std::move(v));
  }
  return out;
}

}  // namespace mn::reference
