#pragma once
// What an op converter sees of the import: its node's inputs (graph tensors, or values known
// while importing), attributes, and where its outputs go.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/graph.h>
#include <meganeura/onnx.h>

namespace onnx {
class NodeProto;
class AttributeProto;
class TensorProto;
}  // namespace onnx

namespace mn::onnx {

// An ONNX value during the import.
struct Value {
  enum class Source : uint8_t {
    computed,     // a node's output on the graph
    known,        // computed while importing (constants, folded shape arithmetic)
    initializer,  // an initializer: known, and a parameter when computed with (floats)
    input,        // a graph input (known too when ImportOptions::input_values gives it)
  };
  std::string name;
  Source source = Source::computed;
  ElemType type = ElemType::f32;  // the model's element type
  Shape shape;
  Tensor tensor;              // on the graph (made on first use for inputs and initializers)
  std::optional<Array> host;  // the value, where known
};

class Importer;

class NodeContext {
 public:
  NodeContext(Importer& importer, const ::onnx::NodeProto& node, int64_t opset, Graph& graph,
              bool folding);

  const ::onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  Graph& graph() { return graph_; }
  // "node 'conv1' (Conv, opset 13)"
  std::string where() const;

  // Inputs. An empty name (ONNX's omitted optional input) is absent.
  size_t input_count() const;
  bool has(size_t i) const;
  const Value& value(size_t i) const;
  ElemType type(size_t i) const { return value(i).type; }
  const Shape& shape(size_t i) const { return value(i).shape; }
  int rank(size_t i) const { return static_cast<int>(shape(i).size()); }
  // The input as a graph tensor (a known value becomes a constant, an initializer a parameter).
  Tensor in(size_t i);
  // The input as a graph tensor of f32 when it holds BOOL or integers.
  Tensor in_float(size_t i);
  // The input's value, which this op needs while the graph is built (`what` names the operand).
  const Array& known(size_t i, const std::string& what);
  bool is_known(size_t i) const;
  std::vector<int64_t> known_ints(size_t i, const std::string& what);
  double known_scalar(size_t i, const std::string& what);

  // Attributes.
  bool has_attr(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  std::optional<int64_t> attr_int(const std::string& name) const;
  double attr_float(const std::string& name, double fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::optional<std::vector<int64_t>> attr_ints_opt(const std::string& name) const;
  std::vector<float> attr_floats(const std::string& name) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  const ::onnx::TensorProto* attr_tensor(const std::string& name) const;
  const ::onnx::AttributeProto* attr(const std::string& name) const;

  // Outputs. A tensor whose dtype is not the graph dtype of `type` is cast to it (BOOL: f32).
  size_t output_count() const;
  bool wants(size_t i) const;  // the output is named (used or declared)
  void out(size_t i, Tensor t, ElemType type);
  void out_known(size_t i, Array a, ElemType type);

  // Errors naming the node.
  [[noreturn]] void unsupported(const std::string& why) const;
  [[noreturn]] void fail(const std::string& why) const;

  // A normalized axis of an input of rank `rank`.
  int axis(int64_t a, int rank, const char* what = "axis") const;
  // A scalar constant of `like`'s dtype.
  Tensor scalar(double v, const Tensor& like);
  // Refuses to compute more than 2^24 values on the host while importing (index tables, masks,
  // ranges): a malformed model must not make the import allocate without bound.
  void host_limit(int64_t elements, const std::string& what) const;

  bool folding() const { return folding_; }
  // Where the importer collects outputs after the converter ran.
  std::vector<std::optional<Value>>& outputs() { return outputs_; }

 private:
  Importer& importer_;
  const ::onnx::NodeProto& node_;
  int64_t opset_;
  Graph& graph_;
  bool folding_;
  std::vector<std::optional<Value>> outputs_;
};

using Converter = std::function<void(NodeContext&)>;

// The domain of ONNX's optimizer ops (Adagrad, Adam, Momentum), version 1.
inline constexpr const char* kPreviewTrainingDomain = "ai.onnx.preview.training";

// y with its last axis moved to position `axis` (one_hot's class axis where ONNX wants it).
Tensor last_axis_to(Tensor y, int axis);

// Input i as i32 indices into an axis of n, ONNX's negative entries counted from the end (known
// indices checked against n here, computed ones wrapped on the device).
Tensor wrapped_indices(NodeContext& c, size_t i, int64_t n);

// The converter table, filled by the ops_*.cpp families.
struct ConverterTable {
  std::map<std::string, Converter, std::less<>> by_op;
  void add(const std::string& op, Converter c) { by_op.emplace(op, std::move(c)); }
};
void add_elementwise_converters(ConverterTable& t);  // ops_elementwise.cpp
void add_shape_converters(ConverterTable& t);        // ops_shape.cpp
void add_nn_converters(ConverterTable& t);           // ops_nn.cpp
void add_reduce_converters(ConverterTable& t);       // ops_reduce.cpp
void add_resize_converters(ConverterTable& t);       // ops_resize.cpp
void add_indexed_converters(ConverterTable& t);      // ops_indexed.cpp
void add_einsum_converter(ConverterTable& t);        // ops_einsum.cpp
void add_recurrent_converters(ConverterTable& t);    // ops_recurrent.cpp
void add_signal_converters(ConverterTable& t);       // ops_signal.cpp
void add_grid_sample_converter(ConverterTable& t);   // ops_grid_sample.cpp
void add_training_converters(ConverterTable& t);     // ops_training.cpp, keyed "<domain>.<op>"
void add_linalg_converters(ConverterTable& t);       // ops_linalg.cpp
void add_text_converters(ConverterTable& t);         // ops_text.cpp
const ConverterTable& converter_table();

// The importer's side of NodeContext: values by name.
class Importer {
 public:
  Importer(Graph& graph, const ImportOptions& options) : graph_(graph), options_(options) {}
  Value& value(const std::string& name, const std::string& where);
  bool has_value(const std::string& name) const { return values_.count(name) != 0; }
  void set_value(Value v) { values_[v.name] = std::move(v); }
  // The value as a tensor of `graph` (the main graph, or a scratch graph when folding).
  Tensor materialize(Value& v, Graph& graph, const std::string& where);
  // Record that an input's given value was used.
  void note_specialized(const std::string& input);
  // Node `id` of the main graph evaluated by the reference, when it is computed only from model
  // inputs whose values were given (ImportOptions::input_values, then specialized) and
  // constants; nullptr when it reads anything else or is large.
  const Array* evaluate_from_given_inputs(NodeId id);
  const std::vector<std::string>& specialized() const { return specialized_; }
  std::map<std::string, Array>& weights() { return weights_; }

 private:
  Graph& graph_;
  const ImportOptions& options_;
  std::map<std::string, Value> values_;
  std::map<std::string, Array> weights_;
  std::vector<std::string> specialized_;
  std::map<NodeId, Array> evaluated_;  // by evaluate_from_given_inputs
};

}  // namespace mn::onnx
