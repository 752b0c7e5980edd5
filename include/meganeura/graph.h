#pragma once
// The graph language: a Graph owns nodes; a Tensor is a handle to one node's single output.
//
//   mn::Graph g;
//   auto x = g.input("x", {16, 784});
//   auto w1 = g.parameter("w1", {784, 128}, mn::Init::kaiming_uniform(1));
//   auto b1 = g.parameter("b1", {128});
//   auto h = relu(matmul(x, w1) + b1);
//   g.output("logits", h);
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/attrs.h>
#include <meganeura/dtype.h>
#include <meganeura/error.h>

namespace mn {

struct OpDef;  // the op table entry (src/ir/op_def.h)
class Graph;
using NodeId = int32_t;

// Parameter initializers. Fan-in/out: 2-D [in, out] weights (as matmul(x, w) uses them) take
// fan_in = shape[0], fan_out = shape[1]; N-D [out, in, k...] weights (conv) take
// fan_in = shape[1]·∏k, fan_out = shape[0]·∏k; 1-D takes fan_in = fan_out = shape[0].
struct Init {
  enum class Kind : uint8_t {
    zeros,
    ones,
    constant,
    normal,
    uniform,
    kaiming_normal,
    kaiming_uniform,
    xavier_normal,
    xavier_uniform,
    normal_zero_row,
    sinusoids
  };
  Kind kind = Kind::zeros;
  // constant: value; normal: mean; uniform: low; kaiming: negative slope; xavier: gain;
  // normal_zero_row: the row (index on the first axis) left at zero; sinusoids: the longest
  // timescale.
  double a = 0.0;
  double b = 0.0;  // normal, normal_zero_row: std; uniform: high
  uint64_t seed = 0;

  static Init zeros() { return {Kind::zeros}; }
  static Init ones() { return {Kind::ones}; }
  static Init constant(double v) { return {Kind::constant, v}; }
  static Init normal(double mean, double std, uint64_t seed) {
    return {Kind::normal, mean, std, seed};
  }
  static Init uniform(double lo, double hi, uint64_t seed) { return {Kind::uniform, lo, hi, seed}; }
  static Init kaiming_normal(uint64_t seed, double slope = 0.0) {
    return {Kind::kaiming_normal, slope, 0, seed};
  }
  static Init kaiming_uniform(uint64_t seed, double slope = 0.0) {
    return {Kind::kaiming_uniform, slope, 0, seed};
  }
  static Init xavier_normal(uint64_t seed, double gain = 1.0) {
    return {Kind::xavier_normal, gain, 0, seed};
  }
  static Init xavier_uniform(uint64_t seed, double gain = 1.0) {
    return {Kind::xavier_uniform, gain, 0, seed};
  }
  // N(0, std) with one row zero: torch.nn.Embedding's padding_idx.
  static Init normal_zero_row(double std, int64_t row, uint64_t seed) {
    return {Kind::normal_zero_row, static_cast<double>(row), std, seed};
  }

  // Positions × channels [P, C]: row p is sin(p·t_i) for the first C/2 channels and cos(p·t_i)
  // for the others, t_i = max_timescale^(-i / (C/2 - 1)): Whisper's encoder positions.
  static Init sinusoids(double max_timescale = 10000.0) { return {Kind::sinusoids, max_timescale}; }

  bool operator==(const Init&) const = default;
  auto fields() const { return std::tie(kind, a, b, seed); }
  static constexpr std::array<const char*, 4> names{"init", "a", "b", "seed"};
};

// Deterministic values of an initializer (the same on every machine for the same seed).
Array initialize(const Init& init, const Shape& shape, DType dtype = DType::f32);

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* g, NodeId id) : g_(g), id_(id) {}

  bool valid() const { return g_ != nullptr; }
  Graph& graph() const;
  NodeId id() const { return id_; }
  const TensorType& type() const;
  const Shape& shape() const { return type().shape; }
  DType dtype() const { return type().dtype; }
  int rank() const { return type().rank(); }
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t numel() const { return type().numel(); }
  bool operator==(const Tensor& o) const { return g_ == o.g_ && id_ == o.id_; }

 private:
  Graph* g_ = nullptr;
  NodeId id_ = -1;
};

struct Node {
  const OpDef* op = nullptr;
  Attrs attrs;
  std::vector<NodeId> inputs;
  TensorType type;
  std::string name;  // inputs, parameters and states: their name

  std::string_view op_name() const;
};

// Attributes of the source ops (input, parameter, constant).
struct InputAttrs {
  std::string name;
  auto fields() const { return std::tie(name); }
  static constexpr std::array<const char*, 1> names{"name"};
};
struct ParameterAttrs {
  std::string name;
  Init init;
  auto fields() const { return std::tie(name, init); }
  static constexpr std::array<const char*, 2> names{"name", "init"};
};
// A constant's value, compared and hashed by content.
struct ConstantValue {
  std::shared_ptr<const Array> array;
  bool operator==(const ConstantValue& o) const;
};
uint64_t hash_value(const ConstantValue& v, uint64_t h);
void print_value(std::ostream& os, const ConstantValue& v);

struct StateAttrs {
  std::string name;
  Init init;
  auto fields() const { return std::tie(name, init); }
  static constexpr std::array<const char*, 2> names{"name", "init"};
};
struct ConstantAttrs {
  ConstantValue value;
  auto fields() const { return std::tie(value); }
  static constexpr std::array<const char*, 1> names{"value"};
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;  // Tensors point at their Graph: copies would alias
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  Tensor input(const std::string& name, Shape shape, DType dtype = DType::f32);
  Tensor parameter(const std::string& name, Shape shape, Init init = Init::zeros(),
                   DType dtype = DType::f32);
  // A persistent non-trainable tensor (optimizer moments, running statistics): it keeps its
  // value across steps and changes only through assign().
  Tensor state(const std::string& name, Shape shape, Init init = Init::zeros(),
               DType dtype = DType::f32);
  Tensor constant(Array value);
  Tensor scalar(double value, DType dtype = DType::f32);
  // After each step, `target` (a parameter or state) takes `value`'s value. All reads of the
  // target within the step see the old value.
  void assign(Tensor target, Tensor value);
  // Marks `t` as a named output; names are unique.
  void output(const std::string& name, Tensor t);

  // Appends a node; shape/dtype inference throws mn::ShapeError naming the op and the inputs.
  Tensor apply(std::string_view op, Attrs attrs, const std::vector<Tensor>& inputs);
  Tensor apply(const OpDef& op, Attrs attrs, const std::vector<NodeId>& inputs);

  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  const std::deque<Node>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  Tensor tensor(NodeId id) { return {this, id}; }

  const std::vector<NodeId>& inputs() const { return inputs_; }
  const std::vector<NodeId>& parameters() const { return parameters_; }
  const std::vector<NodeId>& states() const { return states_; }
  // (target, value) pairs in the order they were made.
  const std::vector<std::pair<NodeId, NodeId>>& assignments() const { return assignments_; }
  const std::vector<std::pair<std::string, NodeId>>& outputs() const { return outputs_; }
  std::optional<NodeId> find_input(std::string_view name) const;
  std::optional<NodeId> find_parameter(std::string_view name) const;
  std::optional<NodeId> find_state(std::string_view name) const;
  // A parameter or state by name.
  std::optional<NodeId> find_persistent(std::string_view name) const;
  std::optional<NodeId> find_output(std::string_view name) const;

  // One line per node: "%3 = add(%1, %2) : f32[16, 10]".
  std::string str() const;
  // Stable across runs and machines: depends only on structure, attributes and types.
  uint64_t hash() const;

 private:
  NodeId push(Node n);
  void check_new_name(const char* where, const std::string& name) const;
  // A deque: appending never moves existing nodes, so references from node(), Tensor::type()
  // and Tensor::shape() stay valid while ops are added (vjps build graphs while holding them).
  std::deque<Node> nodes_;
  std::vector<NodeId> inputs_;
  std::vector<NodeId> parameters_;
  std::vector<NodeId> states_;
  std::vector<std::pair<NodeId, NodeId>> assignments_;
  std::vector<std::pair<std::string, NodeId>> outputs_;
};

}  // namespace mn

#include <meganeura/ops.h>
