#include <meganeura/graph.h>

#include <sstream>

#include "ir/op_def.h"

namespace mn {

bool ConstantValue::operator==(const ConstantValue& o) const {
  if (array == o.array) return true;
  if (!array || !o.array) return false;
  return array->shape == o.array->shape && array->dtype == o.array->dtype &&
         array->data == o.array->data;
}

uint64_t hash_value(const ConstantValue& v, uint64_t h) {
  if (!v.array) return attr_detail::hash_mix(h, 0);
  h = attr_detail::hash_value(v.array->shape, h);
  h = attr_detail::hash_value(v.array->dtype, h);
  for (double x : v.array->data) h = attr_detail::hash_value(x, h);
  return h;
}

void print_value(std::ostream& os, const ConstantValue& v) {
  if (!v.array) {
    os << "null";
    return;
  }
  os << v.array->type().str();
  if (v.array->numel() <= 8) {
    os << ' ';
    attr_detail::print_value(os, v.array->data);
  }
}

Graph& Tensor::graph() const {
  if (!g_) throw Error("use of an empty Tensor (no graph)");
  return *g_;
}

const TensorType& Tensor::type() const { return graph().node(id_).type; }

int64_t Tensor::dim(int axis) const { return shape()[normalize_axis(axis, rank(), "Tensor::dim")]; }

std::string_view Node::op_name() const { return op ? std::string_view(op->name) : "?"; }

namespace {
// Sources have positive dimensions whose product, in elements and bytes, fits int64.
void check_source_shape(const std::string& where, const Shape& shape, DType dtype) {
  for (int64_t d : shape) {
    if (d <= 0) throw ShapeError(where + ": bad shape " + shape_str(shape));
  }
  check_tensor_size({shape, dtype}, where);
}

// "(f32[2, 3], i32[4])": the operand types an op's errors name.
std::string describe_inputs(const std::vector<TensorType>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s + ")";
}
}  // namespace

NodeId Graph::push(Node n) {
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

void Graph::check_new_name(const char* where, const std::string& name) const {
  if (name.empty()) throw Error(std::string(where) + ": empty name");
  if (find_input(name) || find_persistent(name)) {
    throw Error(std::string(where) + ": name '" + name +
                "' is already used by an input, parameter or state");
  }
  // Session::get reads tensors by name: a source and another tensor's output may not share one.
  if (find_output(name)) {
    throw Error(std::string(where) + ": name '" + name + "' is already used by an output");
  }
}

Tensor Graph::input(const std::string& name, Shape shape, DType dtype) {
  check_new_name("Graph::input", name);
  check_source_shape("Graph::input '" + name + "'", shape, dtype);
  Node n{&op_def("input"), InputAttrs{name}, {}, {std::move(shape), dtype}, name};
  NodeId id = push(std::move(n));
  inputs_.push_back(id);
  return {this, id};
}

Tensor Graph::parameter(const std::string& name, Shape shape, Init init, DType dtype) {
  check_new_name("Graph::parameter", name);
  if (!is_float(dtype)) throw Error("Graph::parameter '" + name + "': parameters are float");
  check_source_shape("Graph::parameter '" + name + "'", shape, dtype);
  Node n{&op_def("parameter"), ParameterAttrs{name, init}, {}, {std::move(shape), dtype}, name};
  NodeId id = push(std::move(n));
  parameters_.push_back(id);
  return {this, id};
}

Tensor Graph::state(const std::string& name, Shape shape, Init init, DType dtype) {
  check_new_name("Graph::state", name);
  check_source_shape("Graph::state '" + name + "'", shape, dtype);
  Node n{&op_def("state"), StateAttrs{name, init}, {}, {std::move(shape), dtype}, name};
  NodeId id = push(std::move(n));
  states_.push_back(id);
  return {this, id};
}

void Graph::assign(Tensor target, Tensor value) {
  if (&target.graph() != this || &value.graph() != this) {
    throw Error("Graph::assign: tensors of another graph");
  }
  const Node& t = node(target.id());
  if (t.op_name() != "parameter" && t.op_name() != "state") {
    throw Error("Graph::assign: target %" + std::to_string(target.id()) + " is a " +
                std::string(t.op_name()) + ", not a parameter or state");
  }
  if (value.type() != t.type) {
    throw ShapeError("Graph::assign '" + t.name + "': value " + value.type().str() +
                     " does not match " + t.type.str());
  }
  for (const auto& [tid, vid] : assignments_) {
    if (tid == target.id()) throw Error("Graph::assign: '" + t.name + "' is assigned twice");
  }
  assignments_.emplace_back(target.id(), value.id());
}

Tensor Graph::constant(Array value) {
  TensorType t = value.type();
  for (double& v : value.data) v = round_to_dtype(v, value.dtype);
  Node n{&op_def("constant"),
         ConstantAttrs{ConstantValue{std::make_shared<const Array>(std::move(value))}},
         {},
         std::move(t),
         {}};
  return {this, push(std::move(n))};
}

Tensor Graph::scalar(double value, DType dtype) { return constant(Array::scalar(value, dtype)); }

void Graph::output(const std::string& name, Tensor t) {
  if (&t.graph() != this) throw Error("Graph::output '" + name + "': tensor of another graph");
  if (find_output(name)) throw Error("Graph::output: duplicate output name '" + name + "'");
  // Session::get reads tensors by name: an output may carry a source's name only if it is it.
  std::optional<NodeId> source = find_input(name);
  if (!source) source = find_persistent(name);
  if (source && *source != t.id()) {
    throw Error("Graph::output '" + name +
                "': the name is already used by an input, parameter or state (another tensor)");
  }
  outputs_.emplace_back(name, t.id());
}

Tensor Graph::apply(std::string_view op, Attrs attrs, const std::vector<Tensor>& inputs) {
  std::vector<NodeId> ids;
  ids.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.valid()) {
      throw Error(std::string(op) + ": input " + std::to_string(i) + " is an empty Tensor");
    }
    if (&t.graph() != this) {
      throw Error(std::string(op) + ": input " + std::to_string(i) + " belongs to another graph");
    }
    ids.push_back(t.id());
  }
  return apply(op_def(op), std::move(attrs), ids);
}

Tensor Graph::apply(const OpDef& op, Attrs attrs, const std::vector<NodeId>& inputs) {
  if (op.arity >= 0 && static_cast<int>(inputs.size()) != op.arity) {
    throw Error(op.name + ": expects " + std::to_string(op.arity) + " inputs, got " +
                std::to_string(inputs.size()));
  }
  if (op.arity < 0 && inputs.empty()) throw Error(op.name + ": expects at least one input");
  std::vector<TensorType> types;
  types.reserve(inputs.size());
  for (NodeId id : inputs) {
    if (id < 0 || static_cast<size_t>(id) >= nodes_.size()) {
      throw Error(op.name + ": input node %" + std::to_string(id) + " does not exist");
    }
    types.push_back(nodes_[static_cast<size_t>(id)].type);
  }
  TensorType out = op.infer(attrs, types);
  check_tensor_size(out, op.name + describe_inputs(types));
  return {this, push(Node{&op, std::move(attrs), inputs, std::move(out), {}})};
}

namespace {
template <class Vec>
std::optional<NodeId> find_named(const std::deque<Node>& nodes, const Vec& ids,
                                 std::string_view name) {
  for (NodeId id : ids) {
    if (nodes[static_cast<size_t>(id)].name == name) return id;
  }
  return std::nullopt;
}
}  // namespace

std::optional<NodeId> Graph::find_input(std::string_view name) const {
  return find_named(nodes_, inputs_, name);
}
std::optional<NodeId> Graph::find_parameter(std::string_view name) const {
  return find_named(nodes_, parameters_, name);
}
std::optional<NodeId> Graph::find_state(std::string_view name) const {
  return find_named(nodes_, states_, name);
}
std::optional<NodeId> Graph::find_persistent(std::string_view name) const {
  if (auto p = find_parameter(name)) return p;
  return find_state(name);
}
std::optional<NodeId> Graph::find_output(std::string_view name) const {
  for (const auto& [n, id] : outputs_) {
    if (n == name) return id;
  }
  return std::nullopt;
}

std::string Graph::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    os << '%' << i << " = " << n.op_name() << '(';
    for (size_t j = 0; j < n.inputs.size(); ++j) os << (j ? ", %" : "%") << n.inputs[j];
    std::string a = n.attrs.str();
    if (!a.empty()) os << (n.inputs.empty() ? "" : "; ") << a;
    os << ") : " << n.type.str() << '\n';
  }
  for (const auto& [name, id] : outputs_) os << "output " << name << " = %" << id << '\n';
  for (const auto& [t, v] : assignments_) os << "assign %" << t << " <- %" << v << '\n';
  return os.str();
}

uint64_t Graph::hash() const {
  using attr_detail::hash_mix;
  uint64_t h = 0x6d6e677261706821ULL;
  for (const Node& n : nodes_) {
    h = attr_detail::hash_value(std::string(n.op_name()), h);
    h = hash_mix(h, n.attrs.hash());
    h = hash_mix(h, n.inputs.size());
    for (NodeId i : n.inputs) h = hash_mix(h, static_cast<uint64_t>(i));
    h = attr_detail::hash_value(n.type.shape, h);
    h = attr_detail::hash_value(n.type.dtype, h);
  }
  for (const auto& [name, id] : outputs_) {
    h = attr_detail::hash_value(name, h);
    h = hash_mix(h, static_cast<uint64_t>(id));
  }
  for (const auto& [t, v] : assignments_) {
    h = hash_mix(h, static_cast<uint64_t>(t));
    h = hash_mix(h, static_cast<uint64_t>(v) + 0x5bd1e995ULL);
  }
  return h;
}

}  // namespace mn
