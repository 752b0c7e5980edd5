#include "optimize/tensor_egraph.h"

#include <algorithm>
#include <exception>
#include <unordered_map>

#include <meganeura/error.h>

#include "ir/graph_rewrite.h"

namespace mn::optimize {

using egraph::DidMerge;
using egraph::EGraph;
using egraph::ENode;

// ---- analysis ----

std::shared_ptr<const Array> TensorAnalysis::fold(const EGraph& egraph, const ENode& node,
                                                  const TensorType& type) const {
  const TensorEGraph& o = owner_;
  if (node.op() == o.constant_op_) {
    const Array& v = *o.attrs_as<ConstantAttrs>(node.attr()).value.array;
    if (v.numel() > max_folded_elements) return nullptr;
    return o.attrs_as<ConstantAttrs>(node.attr()).value.array;
  }
  // Sources other than constants have no value here; neither has a node with an unknown operand.
  if (node.arity() == 0 || o.is_source(node.op())) return nullptr;
  if (type.numel() > max_folded_elements) return nullptr;
  const OpDef& def = o.op_def(node.op());
  if (!def.eval) return nullptr;
  const Array* operands[8];
  if (node.arity() > 8) return nullptr;
  for (uint32_t i = 0; i < node.arity(); ++i) {
    operands[i] = data(node.child(i)).value.get();
    if (!operands[i]) return nullptr;
  }
  Node n{&def, o.attrs(node.attr()), {}, type, {}};
  try {
    Array out = def.eval(n, std::span<const Array* const>(operands, node.arity()));
    // A fold that disagrees with inference would break the class-type invariant: keep the node
    // unfolded instead.
    if (out.type() != type) return nullptr;
    return std::make_shared<const Array>(std::move(out));
  } catch (const std::exception&) {
    // The reference rejects these operand values (an index out of range...): the node stays.
    return nullptr;
  }
}

namespace {
std::optional<double> uniform_of_array(const Array& a) {
  if (a.data.empty()) return std::nullopt;
  const double first = a.data[0];
  for (double x : a.data) {
    if (x != first) return std::nullopt;
  }
  return first;
}
}  // namespace

std::optional<double> TensorAnalysis::uniform_of(const ENode& node, const ClassData& d) const {
  const TensorEGraph& o = owner_;
  if (node.op() == o.constant_op_) {
    return uniform_of_array(*o.attrs_as<ConstantAttrs>(node.attr()).value.array);
  }
  if (d.value) return uniform_of_array(*d.value);
  if (node.arity() >= 1 && node.op() < o.moves_elements_.size() && o.moves_elements_[node.op()]) {
    return data(node.child(0)).uniform;
  }
  return std::nullopt;
}

ClassData TensorAnalysis::make(const EGraph& egraph, const ENode& node) {
  ClassData d;
  if (pending_type_) {
    // Consumed here: modify() may add further nodes (folded literals) inside the same add().
    d.type = *pending_type_;
    pending_type_ = nullptr;
  } else {
    const TensorEGraph& o = owner_;
    if (node.op() == o.constant_op_) {
      d.type = o.attrs_as<ConstantAttrs>(node.attr()).value.array->type();
    } else if (o.is_source(node.op())) {
      throw Error("tensor e-graph: source nodes are added by add_graph()");
    } else {
      std::string error;
      auto t = o.infer(o.op_def(node.op()), o.attrs(node.attr()), node.children(), &error);
      if (!t) throw Error("tensor e-graph: a rewrite built an ill-typed node: " + error);
      d.type = std::move(*t);
    }
  }
  d.literal = node.op() == owner_.constant_op_;
  d.value = fold(egraph, node, d.type);
  d.uniform = uniform_of(node, d);
  return d;
}

DidMerge TensorAnalysis::merge(ClassData& into, ClassData from) {
  if (into.type != from.type) {
    throw Error("tensor e-graph: merging classes of types " + into.type.str() + " and " +
                from.type.str() + " (a rewrite changed a type)");
  }
  DidMerge changed;
  if (!into.value && from.value) {
    into.value = std::move(from.value);
    changed.a = true;
  } else if (into.value && !from.value) {
    changed.b = true;
  }
  if (!into.uniform && from.uniform) {
    into.uniform = from.uniform;
    changed.a = true;
  } else if (into.uniform && !from.uniform) {
    changed.b = true;
  }
  if (into.literal != from.literal) {
    (into.literal ? changed.b : changed.a) = true;
    into.literal = true;
  }
  return changed;
}

bool TensorAnalysis::on_update(const EGraph& egraph, Id cls, const ENode& node) {
  ClassData& d = mutable_data(cls);
  bool changed = false;
  if (!d.value) {
    if (auto v = fold(egraph, node, d.type)) {
      d.value = std::move(v);
      changed = true;
    }
  }
  if (!d.uniform) {
    if (auto u = uniform_of(node, d)) {
      d.uniform = u;
      changed = true;
    }
  }
  return changed;
}

void TensorAnalysis::modify(EGraph& egraph, Id cls) {
  const ClassData& d = data(cls);
  if (!d.value || d.literal) return;
  Attrs a = ConstantAttrs{ConstantValue{d.value}};
  const Id lit = egraph.add(owner_.constant_op_, owner_.intern(a), {});
  egraph.merge(cls, lit);
}

// ---- the encoding ----

std::vector<Id> GraphRoots::all() const {
  std::vector<Id> r;
  r.reserve(outputs.size() + assignments.size());
  for (const auto& [name, id] : outputs) r.push_back(id);
  for (const auto& [target, id] : assignments) r.push_back(id);
  return r;
}

TensorEGraph::TensorEGraph() : analysis_(*this), egraph_(&analysis_) {
  attrs_.intern(Attrs{});  // word 0: no attributes, what patterns match by default
  for (const OpDef* def : all_op_defs()) {
    ids_.emplace(def->name, static_cast<OpId>(defs_.size()));
    defs_.push_back(def);
  }
  moves_elements_.assign(defs_.size(), 0);
  for (const char* name : {"broadcast_to", "reshape", "squeeze", "unsqueeze", "permute",
                           "transpose", "slice", "split", "stop_gradient"}) {
    if (auto id = find_op(name)) moves_elements_[*id] = 1;
  }
  input_op_ = op("input");
  parameter_op_ = op("parameter");
  state_op_ = op("state");
  constant_op_ = op("constant");
}

std::optional<OpId> TensorEGraph::find_op(std::string_view name) const {
  auto it = ids_.find(name);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

OpId TensorEGraph::op(std::string_view name) const {
  if (auto id = find_op(name)) return *id;
  throw Error("tensor e-graph: unknown op '" + std::string(name) + "'");
}

std::optional<TensorType> TensorEGraph::infer(const OpDef& op, const Attrs& attrs,
                                              std::span<const Id> children,
                                              std::string* error) const {
  if ((op.arity >= 0 && static_cast<int>(children.size()) != op.arity) ||
      (op.arity < 0 && children.empty())) {
    if (error) {
      *error = op.name + ": expects " + std::to_string(op.arity) + " inputs, got " +
               std::to_string(children.size());
    }
    return std::nullopt;
  }
  TensorType small[4];
  std::vector<TensorType> big;
  std::span<const TensorType> types;
  if (children.size() <= 4) {
    for (size_t i = 0; i < children.size(); ++i) small[i] = type(children[i]);
    types = std::span<const TensorType>(small, children.size());
  } else {
    for (Id c : children) big.push_back(type(c));
    types = big;
  }
  try {
    return op.infer(attrs, types);
  } catch (const Error& e) {  // ShapeError, or a bad attribute
    if (error) *error = e.what();
    return std::nullopt;
  }
}

Id TensorEGraph::add_with_type(OpId op, egraph::Attr word, std::span<const Id> children,
                               const TensorType& type) {
  analysis_.pending_type_ = &type;
  try {
    const Id r = egraph_.add(op, word, children);
    analysis_.pending_type_ = nullptr;  // an existing node never consumed it
    return r;
  } catch (...) {
    analysis_.pending_type_ = nullptr;
    throw;
  }
}

Id TensorEGraph::add(const OpDef& op, const Attrs& attrs, std::span<const Id> children) {
  std::string error;
  auto t = infer(op, attrs, children, &error);
  if (!t) throw ShapeError(error);
  return add_with_type(this->op(op.name), intern(attrs), children, *t);
}

std::optional<Id> TensorEGraph::try_add(const OpDef& op, const Attrs& attrs,
                                        std::span<const Id> children) {
  auto t = infer(op, attrs, children, nullptr);
  if (!t) return std::nullopt;
  return add_with_type(this->op(op.name), intern(attrs), children, *t);
}

std::optional<Id> TensorEGraph::try_add_typed(const OpDef& op, const Attrs& attrs,
                                              std::span<const Id> children,
                                              const TensorType& want) {
  auto t = infer(op, attrs, children, nullptr);
  if (!t || *t != want) return std::nullopt;
  return add_with_type(this->op(op.name), intern(attrs), children, *t);
}

Id TensorEGraph::constant(const Array& value) {
  Attrs a = ConstantAttrs{ConstantValue{std::make_shared<const Array>(value)}};
  return egraph_.add(constant_op_, intern(a), {});
}

Id TensorEGraph::scalar(double value, DType dtype) { return constant(Array::scalar(value, dtype)); }

GraphRoots TensorEGraph::add_graph(const Graph& g) {
  GraphRoots r;
  r.node_class.resize(g.size(), egraph::no_id);
  std::vector<Id> children;
  egraph_.reserve(egraph_.num_ids() + g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    const OpId op = this->op(n.op->name);
    if (op == input_op_ || op == parameter_op_ || op == state_op_) {
      r.sources.push_back(static_cast<NodeId>(i));
      r.node_class[i] = add_with_type(op, intern(n.attrs), {}, n.type);
      continue;
    }
    if (op == constant_op_) {
      r.node_class[i] = egraph_.add(op, intern(n.attrs), {});
      continue;
    }
    children.clear();
    for (NodeId in : n.inputs) children.push_back(r.node_class[static_cast<size_t>(in)]);
    // The graph's own inferred type, which add() would recompute identically.
    r.node_class[i] = add_with_type(op, intern(n.attrs), children, n.type);
  }
  for (const auto& [name, id] : g.outputs()) {
    r.outputs.emplace_back(name, r.node_class[static_cast<size_t>(id)]);
  }
  for (const auto& [target, value] : g.assignments()) {
    r.assignments.emplace_back(target, r.node_class[static_cast<size_t>(value)]);
  }
  return r;
}

Graph TensorEGraph::to_graph(const Graph& original, const GraphRoots& roots,
                             const egraph::Extraction& extraction) const {
  Graph out;
  std::unordered_map<std::string, Tensor> sources;
  for (NodeId id : roots.sources) {
    const Node& n = original.node(id);
    sources.emplace(n.name, copy_leaf(out, n));
  }
  std::vector<Tensor> value(egraph_.num_ids());
  std::vector<NodeId> operands;
  for (Id cls : extraction.order) {
    const ENode& node = egraph_.node(extraction.choice[cls]);
    const OpDef& def = op_def(node.op());
    Tensor t;
    if (node.op() == input_op_ || node.op() == parameter_op_ || node.op() == state_op_) {
      const Attrs& a = attrs(node.attr());
      const std::string& name = node.op() == input_op_       ? a.as<InputAttrs>().name
                                : node.op() == parameter_op_ ? a.as<ParameterAttrs>().name
                                                             : a.as<StateAttrs>().name;
      auto it = sources.find(name);
      if (it == sources.end()) throw Error("to_graph: source '" + name + "' is not in the graph");
      t = it->second;
    } else if (node.op() == constant_op_) {
      t = out.constant(*attrs_as<ConstantAttrs>(node.attr()).value.array);
    } else {
      operands.clear();
      for (Id c : node.children()) {
        const Tensor& in = value[egraph_.find(c)];
        if (!in.valid()) throw Error("to_graph: extraction order uses a class before its choice");
        operands.push_back(in.id());
      }
      t = out.apply(def, attrs(node.attr()), operands);
    }
    if (t.type() != type(cls)) {
      throw Error("to_graph: " + def.name + " re-inferred as " + t.type().str() +
                  " in a class of type " + type(cls).str());
    }
    value[cls] = t;
  }
  auto root_tensor = [&](Id cls, const std::string& what) {
    const Tensor& t = value[egraph_.find(cls)];
    if (!t.valid()) throw Error("to_graph: " + what + " was not extracted");
    return t;
  };
  for (const auto& [name, cls] : roots.outputs) {
    Tensor t = root_tensor(cls, "output '" + name + "'");
    const Node& orig = original.node(*original.find_output(name));
    if (t.type() != orig.type) {
      throw Error("to_graph: output '" + name + "' changed type from " + orig.type.str() + " to " +
                  t.type().str());
    }
    out.output(name, t);
  }
  for (const auto& [target, cls] : roots.assignments) {
    const Node& tn = original.node(target);
    Tensor t = root_tensor(cls, "the value assigned to '" + tn.name + "'");
    out.assign(sources.at(tn.name), t);
  }
  return out;
}

}  // namespace mn::optimize
