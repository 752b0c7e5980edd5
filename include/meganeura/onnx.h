#pragma once
// ONNX models as graphs: a ModelProto (Debian's libonnx / protobuf parse it) becomes an mn::Graph
// whose inputs and outputs keep the model's names and whose float initializers are parameters
// (so an imported model can be fine-tuned with add_training_step).
//
//   auto m = mn::onnx::import_model("resnet18.onnx", {.input_shapes = {{"input", {1, 3, 224, 224}}}});
//   auto session = mn::build_session(m.graph);
//   m.load_weights(*session);
//   session->set("input", image);
//   session->step();
//
// Shapes are static: a dimension the model leaves symbolic (dim_param, or no value) is bound by
// ImportOptions::input_shapes, else the import fails naming the input and the axis. Values that
// decide shapes (a Reshape's target, a Slice's bounds, Resize's scales) must be known when the
// graph is built: constants, initializers, shape arithmetic on them (evaluated while importing),
// or model inputs whose values are given in ImportOptions::input_values, and what the graph
// computes from those and constants (evaluated while importing, the graph then specialized).
//
// Failures are mn::Error with the node's name, op type and opset: an op or attribute value
// meganeura does not support (onnx::UnsupportedError), a malformed or missing file or tensor
// (mn::FormatError naming the file), shapes that disagree (mn::ShapeError).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/graph.h>

namespace mn {
class Session;
}

namespace mn::onnx {

// The model uses something meganeura cannot import: an op, an attribute value, an element type.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

struct ImportOptions {
  // Shapes of inputs, binding their symbolic dimensions (fixed ones must agree).
  std::map<std::string, Shape> input_shapes;
  // Values of inputs that decide shapes. Where the importer needs such a value it uses this one
  // and the graph is specialized to it (ImportedModel::specialized_inputs); where the input
  // is computed with, it stays a graph input.
  std::map<std::string, RawTensor> input_values;
  // Float initializers as parameters (trainable, set with load_weights) or as constants.
  bool initializers_as_parameters = true;
};

// A graph input or output as the model declares it.
struct ValueInfo {
  std::string name;
  ElemType type = ElemType::f32;  // the model's element type
  Shape shape;                    // as bound
  DType dtype = DType::f32;       // the graph's tensor: integers are i32, BOOL is f32 0/1
};

struct ImportedModel {
  Graph graph;
  int64_t opset = 0;  // of the default domain
  std::string producer;  // producer_name and version
  std::vector<ValueInfo> inputs;   // graph inputs the session needs, in model order
  std::vector<ValueInfo> outputs;  // in model order
  // Initial values of the parameters (float initializers), by name.
  std::map<std::string, Array> weights;
  // Inputs whose given values the graph was built for (ImportOptions::input_values).
  std::vector<std::string> specialized_inputs;
  // Op types of the nodes imported, with their counts.
  std::map<std::string, int64_t> op_counts;

  // Writes every weight into the session's parameter of the same name.
  void load_weights(Session& session) const;
};

// A parsed model: its declared inputs can be read before importing it (to bind shapes and
// values from the data at hand) without parsing the file twice.
class ModelFile {
 public:
  // External data files are read from beside the model.
  static ModelFile read(const std::filesystem::path& path);
  // The bytes of a ModelProto; `dir` is where its external data files are, `what` names it.
  static ModelFile from_bytes(const std::string& bytes, const std::filesystem::path& dir,
                              const std::string& what = "model");

  // The inputs the model declares (initializers left out), symbolic dimensions as -1.
  std::vector<ValueInfo> inputs() const;
  ImportedModel import(const ImportOptions& options = {}) const;

 private:
  struct Impl;
  explicit ModelFile(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// ModelFile::read(path).import(options).
ImportedModel import_model(const std::filesystem::path& path, const ImportOptions& options = {});
// The same from the bytes of a ModelProto; `dir` is where its external data files are.
ImportedModel import_model_bytes(const std::string& bytes, const std::filesystem::path& dir,
                                 const ImportOptions& options = {}, const std::string& what = "model");

// ModelFile::read(path).inputs().
std::vector<ValueInfo> model_inputs(const std::filesystem::path& path);

// A serialized TensorProto (the backend test suite's input_N.pb / output_N.pb files); its name,
// where the file gives one, goes to `name`.
RawTensor read_tensor_proto(const std::filesystem::path& path, std::string* name = nullptr);

// An input's value as the graph tensor of `info` wants it: integers range-checked into i32, BOOL
// as 0/1; `what` names it in errors.
Array to_graph_value(const RawTensor& t, const ValueInfo& info, const std::string& what);
// A graph output's value in the model's element type (integers and BOOL back from i32/f32).
RawTensor from_graph_value(const Array& a, const ValueInfo& info, const std::string& what);

// The op types the importer knows (of the default domain).
std::vector<std::string> supported_ops();

}  // namespace mn::onnx
