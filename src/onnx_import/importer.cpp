// The import driver: a ModelProto's initializers, inputs and nodes (in their topological order)
// become graph tensors; nodes whose inputs are all known while importing are evaluated at once
// by the float64 reference (shape arithmetic), so shapes stay static.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <meganeura/onnx.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

// The opsets of the default domain this importer follows. Debian's ONNX 1.12 knows up to 17;
// 18 to 21 (what current PyTorch exports) changed the ops handled here in known ways (axes of
// reductions as inputs, Split's num_outputs, Resize's axes, GroupNormalization's scale per
// channel, Gelu) and otherwise only added element types. Before opset 7 only the forms that
// mean what they mean later import (legacy broadcasting along an `axis` is refused).
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;

// A folded node's inputs larger than this are not evaluated while importing (they become
// constants computed on the device).
constexpr int64_t kFoldLimit = int64_t{1} << 20;

bool foldable(const Value& v, const ImportOptions& o) {
  if (!v.host) return false;
  switch (v.source) {
    case Value::Source::known:
      return v.host->numel() <= kFoldLimit;
    case Value::Source::initializer:
      // Float initializers are parameters unless asked otherwise: keep them trainable.
      return (is_integer(v.type) || v.type == ElemType::boolean || !o.initializers_as_parameters) &&
             v.host->numel() <= kFoldLimit;
    default:
      return false;
  }
}

// Rethrows an error from inside a converter with the file and node named, keeping its kind.
// Messages made by NodeContext name the node already ("node 'x' (Op, opset N): ...").
[[noreturn]] void rethrow_at(const std::string& file, const std::string& node) {
  auto prefixed = [&](const std::exception& e) {
    const std::string m = e.what();
    return file + ": " + (m.rfind("node ", 0) == 0 ? m : node + ": " + m);
  };
  try {
    throw;
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(prefixed(e));
  } catch (const FormatError& e) {
    throw FormatError(prefixed(e));
  } catch (const ShapeError& e) {
    throw ShapeError(prefixed(e));
  } catch (const IndexError& e) {
    throw IndexError(prefixed(e));
  } catch (const Error& e) {
    throw Error(prefixed(e));
  }
}

class ModelImport {
 public:
  ModelImport(const ::onnx::ModelProto& model, const std::filesystem::path& dir,
              const ImportOptions& options, const std::string& what)
      : model_(model), dir_(dir), options_(options), what_(what), importer_(out_.graph, options) {}

  ImportedModel run() {
    read_opset();
    const auto& g = model_.graph();
    if (g.sparse_initializer_size() > 0) {
      throw UnsupportedError(what_ + ": sparse initializers are not supported");
    }
    read_initializers(g);
    read_inputs(g);
    check_options_named(g);
    for (const auto& node : g.node()) convert(node);
    write_outputs(g);
    out_.weights = std::move(importer_.weights());
    out_.specialized_inputs = importer_.specialized();
    return std::move(out_);
  }

 private:
  void read_opset() {
    bool found = false;
    for (const auto& o : model_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        out_.opset = o.version();
        found = true;
      }
      if (o.domain() == kPreviewTrainingDomain) training_opset_ = o.version();
    }
    if (!found) {
      std::string domains;
      for (const auto& o : model_.opset_import()) domains += (domains.empty() ? "" : ", ") + o.domain();
      if (domains.empty()) throw FormatError(what_ + ": the model imports no opset");
      // A model of training ops alone imports only their domain.
      if (training_opset_ > 0 && model_.opset_import_size() == 1) {
        out_.opset = 0;
        check_training_opset();
        return;
      }
      throw UnsupportedError(what_ + ": the model uses only the domains " + domains +
                             ", not the default ONNX domain");
    }
    if (training_opset_ > 0) check_training_opset();
    if (out_.opset < kMinOpset || out_.opset > kMaxOpset) {
      throw UnsupportedError(what_ + ": opset " + std::to_string(out_.opset) +
                             " is outside the supported " + std::to_string(kMinOpset) + " to " +
                             std::to_string(kMaxOpset));
    }
    out_.producer = model_.producer_name() +
                    (model_.producer_version().empty() ? "" : " " + model_.producer_version());
  }

  void read_initializers(const ::onnx::GraphProto& g) {
    for (const auto& t : g.initializer()) {
      const std::string what = what_ + ": initializer '" + t.name() + "'";
      if (t.name().empty()) throw FormatError(what_ + ": an initializer without a name");
      RawTensor raw = tensor_from_proto(t, dir_, what);
      Value v;
      v.name = t.name();
      v.source = Value::Source::initializer;
      v.type = raw.type;
      v.shape = raw.shape;
      v.host = host_array(raw);
      importer_.set_value(std::move(v));
    }
  }

  // An input's shape: the model's dimensions, symbolic ones bound by input_shapes.
  Shape bound_shape(const ::onnx::ValueInfoProto& in, const std::string& what) {
    const auto& tt = in.type().tensor_type();
    auto given = options_.input_shapes.find(in.name());
    const bool has_given = given != options_.input_shapes.end();
    Shape s;
    if (!tt.has_shape()) {
      if (!has_given) throw ShapeError(what + " has no shape in the model: give it with input_shapes");
      s = given->second;
    } else {
      const auto& dims = tt.shape().dim();
      if (has_given && given->second.size() != static_cast<size_t>(dims.size())) {
        throw ShapeError(what + " has rank " + std::to_string(dims.size()) +
                         " but input_shapes gives " + shape_str(given->second));
      }
      for (int a = 0; a < dims.size(); ++a) {
        const auto& d = dims.Get(a);
        if (d.has_dim_value()) {
          if (has_given && given->second[a] != d.dim_value()) {
            throw ShapeError(what + " axis " + std::to_string(a) + " is " +
                             std::to_string(d.dim_value()) + " in the model, not " +
                             std::to_string(given->second[a]) + " as input_shapes gives");
          }
          s.push_back(d.dim_value());
        } else if (has_given) {
          s.push_back(given->second[a]);
        } else {
          const std::string sym = d.has_dim_param() ? " ('" + d.dim_param() + "')" : "";
          throw ShapeError(what + " axis " + std::to_string(a) + " is symbolic" + sym +
                           ": give the input's shape with input_shapes");
        }
      }
    }
    return s;
  }

  void read_inputs(const ::onnx::GraphProto& g) {
    for (const auto& in : g.input()) {
      if (importer_.has_value(in.name())) continue;  // an initializer listed as an input
      const std::string what = what_ + ": input '" + in.name() + "'";
      if (!in.type().has_tensor_type()) throw UnsupportedError(what + " is not a tensor");
      Value v;
      v.name = in.name();
      v.source = Value::Source::input;
      v.type = elem_type_of(in.type().tensor_type().elem_type(), what);
      v.shape = bound_shape(in, what);
      ValueInfo info{v.name, v.type, v.shape, DType::f32};
      if (auto it = options_.input_values.find(in.name()); it != options_.input_values.end()) {
        if (it->second.shape != v.shape) {
          throw ShapeError(what + ": the value given has shape " + shape_str(it->second.shape) +
                           ", the input " + shape_str(v.shape));
        }
        v.host = host_array(it->second);
      }
      model_inputs_.push_back(std::move(info));
      importer_.set_value(std::move(v));
    }
  }

  void check_options_named(const ::onnx::GraphProto& g) {
    auto is_input = [&](const std::string& name) {
      return std::any_of(g.input().begin(), g.input().end(),
                         [&](const auto& in) { return in.name() == name; });
    };
    for (const auto& [name, s] : options_.input_shapes) {
      if (!is_input(name)) throw Error(what_ + ": input_shapes names '" + name + "', which is not a model input");
    }
    for (const auto& [name, s] : options_.input_values) {
      if (!is_input(name)) throw Error(what_ + ": input_values names '" + name + "', which is not a model input");
    }
  }

  void check_training_opset() const {
    if (training_opset_ != 1) {
      throw UnsupportedError(what_ + ": version " + std::to_string(training_opset_) + " of " +
                             kPreviewTrainingDomain + " (1 is supported)");
    }
  }

  void convert(const ::onnx::NodeProto& node) {
    const bool training = node.domain() == kPreviewTrainingDomain;
    if (!node.domain().empty() && node.domain() != "ai.onnx" && !training) {
      throw UnsupportedError(what_ + ": node '" + node.name() + "' (" + node.op_type() +
                             ") is in domain '" + node.domain() + "'; only the default ONNX " +
                             "domain and " + kPreviewTrainingDomain + " are supported");
    }
    if (training ? training_opset_ == 0 : out_.opset == 0) {
      throw UnsupportedError(what_ + ": node '" + node.name() + "' (" + node.op_type() +
                             ") is in a domain the model does not import");
    }
    const int64_t opset = training ? training_opset_ : out_.opset;
    const auto& table = converter_table().by_op;
    auto it = table.find(training ? std::string(kPreviewTrainingDomain) + "." + node.op_type()
                                   : node.op_type());
    Graph scratch;
    bool folding = node.input_size() > 0 || node.op_type() == "Constant";
    for (const auto& name : node.input()) {
      if (name.empty()) continue;
      folding = folding && foldable(importer_.value(name, what_ + ": node '" + node.name() + "'"), options_);
    }
    std::optional<NodeContext> ctx;
    ctx.emplace(importer_, node, opset, folding ? scratch : out_.graph, folding);
    try {
      if (it == table.end()) ctx->unsupported("op " + node.op_type() + " is not supported");
      it->second(*ctx);
      if (folding && folds_too_much(*ctx)) {  // a large result is computed on the device instead
        folding = false;
        ctx.emplace(importer_, node, opset, out_.graph, false);
        it->second(*ctx);
      }
      for (size_t i = 0; i < ctx->output_count(); ++i) {
        if (ctx->wants(i) && !ctx->outputs()[i]) {
          ctx->unsupported("output " + std::to_string(i) + " is not produced");
        }
      }
    } catch (const Error&) {
      rethrow_at(what_, ctx->where());
    }
    std::vector<NodeId> folded;
    for (auto& v : ctx->outputs()) {
      if (v && folding && v->source == Value::Source::computed) folded.push_back(v->tensor.id());
    }
    if (!folded.empty()) evaluate_folded(*ctx, scratch, folded);
    for (auto& v : ctx->outputs()) {
      if (v) importer_.set_value(std::move(*v));
    }
    ++out_.op_counts[node.op_type()];
  }

  static bool folds_too_much(NodeContext& ctx) {
    for (const auto& v : ctx.outputs()) {
      if (v && v->source == Value::Source::computed && mn::numel(v->shape) > kFoldLimit) return true;
    }
    return false;
  }

  // The folded node's outputs, computed now by the reference.
  void evaluate_folded(NodeContext& ctx, const Graph& scratch, const std::vector<NodeId>& ids) {
    std::vector<Array> values;
    try {
      values = reference::evaluate_nodes(scratch, {}, ids);
    } catch (const Error&) {
      rethrow_at(what_, ctx.where());
    }
    size_t k = 0;
    for (auto& v : ctx.outputs()) {
      if (!v || v->source != Value::Source::computed) continue;
      v->source = Value::Source::known;
      v->host = std::move(values[k++]);
      v->tensor = {};
    }
  }

  void write_outputs(const ::onnx::GraphProto& g) {
    for (const auto& o : g.output()) {
      const std::string what = what_ + ": output '" + o.name() + "'";
      Value& v = importer_.value(o.name(), what);
      Tensor t = importer_.materialize(v, out_.graph, what);
      if (o.type().has_tensor_type() && o.type().tensor_type().has_shape()) {
        const auto& dims = o.type().tensor_type().shape().dim();
        bool fixed_differs = dims.size() != static_cast<int>(v.shape.size());
        for (int a = 0; !fixed_differs && a < dims.size(); ++a) {
          fixed_differs = dims.Get(a).has_dim_value() && dims.Get(a).dim_value() != v.shape[a];
        }
        if (fixed_differs) {
          std::ostringstream declared;
          for (int a = 0; a < dims.size(); ++a) {
            declared << (a ? ", " : "")
                     << (dims.Get(a).has_dim_value() ? std::to_string(dims.Get(a).dim_value()) : "?");
          }
          throw ShapeError(what + " is declared [" + declared.str() + "] but computes to " +
                           shape_str(v.shape));
        }
      }
      out_.graph.output(o.name(), t);
      out_.outputs.push_back({o.name(), v.type, v.shape, t.dtype()});
    }
    drop_unneeded_specialized_inputs();
    for (auto& info : model_inputs_) {
      if (auto id = out_.graph.find_input(info.name)) {
        info.dtype = out_.graph.node(*id).type.dtype;
        out_.inputs.push_back(info);
      }
    }
  }

  // An input whose given value decided shapes through values computed on the graph (rows = n + 1)
  // stays on the graph although no output needs it: a session would then ask for it, and
  // ignore the value. Such inputs, and what only they fed, leave the graph.
  void drop_unneeded_specialized_inputs() {
    const Graph& g = out_.graph;
    std::vector<char> needed(g.size(), 0);
    std::vector<NodeId> stack;
    for (const auto& [name, id] : g.outputs()) stack.push_back(id);
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (needed[static_cast<size_t>(id)]) continue;
      needed[static_cast<size_t>(id)] = 1;
      for (NodeId in : g.node(id).inputs) stack.push_back(in);
    }
    std::set<std::string> drop;
    for (const std::string& name : importer_.specialized()) {
      const std::optional<NodeId> id = g.find_input(name);
      if (id && !needed[static_cast<size_t>(*id)]) drop.insert(name);
    }
    if (drop.empty()) return;
    Graph pruned;
    std::vector<NodeId> map(g.size(), -1);
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.node(static_cast<NodeId>(i));
      const std::string_view op = n.op_name();
      Tensor t;
      if (op == "input") {
        if (drop.count(n.name)) continue;
        t = pruned.input(n.name, n.type.shape, n.type.dtype);
      } else if (op == "parameter") {  // every weight stays, for load_weights
        t = pruned.parameter(n.name, n.type.shape, n.attrs.as<ParameterAttrs>().init, n.type.dtype);
      } else if (!needed[i]) {
        continue;
      } else if (op == "constant") {
        t = pruned.constant(*n.attrs.as<ConstantAttrs>().value.array);
      } else {
        std::vector<NodeId> in;
        for (NodeId x : n.inputs) in.push_back(map[static_cast<size_t>(x)]);
        t = pruned.apply(*n.op, n.attrs, in);
      }
      map[i] = t.id();
    }
    for (const auto& [name, id] : g.outputs()) {
      pruned.output(name, pruned.tensor(map[static_cast<size_t>(id)]));
    }
    out_.graph = std::move(pruned);
  }

  const ::onnx::ModelProto& model_;
  std::filesystem::path dir_;
  const ImportOptions& options_;
  std::string what_;
  ImportedModel out_;
  Importer importer_;
  std::vector<ValueInfo> model_inputs_;
  int64_t training_opset_ = 0;  // of ai.onnx.preview.training, 0 when not imported
};

}  // namespace

Value& Importer::value(const std::string& name, const std::string& where) {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw FormatError(where + ": value '" + name +
                      "' is used before any node, input or initializer defines it");
  }
  return it->second;
}

Tensor Importer::materialize(Value& v, Graph& graph, const std::string& where) {
  if (&graph != &graph_) {  // a scratch graph: only known values reach it
    if (v.tensor.valid() && &v.tensor.graph() == &graph) return v.tensor;
    Array a = *v.host;
    return graph.constant(std::move(a));
  }
  if (v.tensor.valid()) return v.tensor;
  const DType dtype = graph_dtype_of(v.type, where + ": value '" + v.name + "'");
  switch (v.source) {
    case Value::Source::input:
      if (mn::numel(v.shape) == 0) {
        throw UnsupportedError(where + ": input '" + v.name + "' has shape " + shape_str(v.shape) +
                               ": zero-sized tensors are not supported");
      }
      v.tensor = graph_.input(v.name, v.shape, dtype);
      break;
    case Value::Source::initializer:
      if (is_float(dtype) && v.type != ElemType::boolean && options_.initializers_as_parameters) {
        v.tensor = graph_.parameter(v.name, v.shape, Init::zeros(), dtype);
        Array w = *v.host;
        w.dtype = dtype;
        weights_[v.name] = std::move(w);
        break;
      }
      [[fallthrough]];
    case Value::Source::known: {
      if (v.host->numel() == 0) {
        throw UnsupportedError(where + ": value '" + v.name + "' is empty (shape " +
                               shape_str(v.shape) + "): zero-sized tensors are not supported");
      }
      Array a = *v.host;
      a.dtype = dtype;
      if (auto i = dtype == DType::i32 ? first_outside_i32(a) : std::nullopt) {
        throw UnsupportedError(where + ": value '" + v.name + "' element " + std::to_string(*i) +
                               " (" + std::to_string(static_cast<int64_t>(a.data[*i])) +
                               ") does not fit the 32-bit integers the GPU computes with");
      }
      v.tensor = graph_.constant(std::move(a));
      break;
    }
    case Value::Source::computed:
      throw Error(where + ": value '" + v.name + "' has no tensor");
  }
  return v.tensor;
}

const Array* Importer::evaluate_from_given_inputs(NodeId id) {
  if (auto it = evaluated_.find(id); it != evaluated_.end()) return &it->second;
  if (graph_.node(id).type.numel() > kFoldLimit) return nullptr;
  std::vector<NodeId> stack{id};
  std::set<NodeId> seen;
  reference::Feeds feeds;
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (seen.size() > 4096) return nullptr;  // not shape arithmetic
    const Node& node = graph_.node(n);
    const std::string_view op = node.op_name();
    if (op == "parameter" || op == "state") return nullptr;
    if (op == "input") {
      const auto it = values_.find(node.name);
      if (it == values_.end() || it->second.source != Value::Source::input || !it->second.host) {
        return nullptr;
      }
      Array a = *it->second.host;
      a.dtype = node.type.dtype;
      feeds[node.name] = std::move(a);
      continue;
    }
    for (NodeId in : node.inputs) stack.push_back(in);
  }
  Array value = reference::evaluate_nodes(graph_, feeds, std::span<const NodeId>(&id, 1)).at(0);
  for (const auto& [name, a] : feeds) note_specialized(name);
  return &evaluated_.emplace(id, std::move(value)).first->second;
}

void Importer::note_specialized(const std::string& input) {
  if (std::find(specialized_.begin(), specialized_.end(), input) == specialized_.end()) {
    specialized_.push_back(input);
  }
}

const ConverterTable& converter_table() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_elementwise_converters(t);
    add_shape_converters(t);
    add_nn_converters(t);
    add_reduce_converters(t);
    add_resize_converters(t);
    add_indexed_converters(t);
    add_einsum_converter(t);
    add_recurrent_converters(t);
    add_signal_converters(t);
    add_grid_sample_converter(t);
    add_training_converters(t);
    add_linalg_converters(t);
    add_text_converters(t);
    return t;
  }();
  return table;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (const auto& [op, c] : converter_table().by_op) out.push_back(op);
  return out;
}

namespace {
std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw FormatError(path.string() + ": read failed");
  return std::move(s).str();
}
}  // namespace

struct ModelFile::Impl {
  ::onnx::ModelProto model;
  std::filesystem::path dir;
  std::string what;
};

ModelFile ModelFile::from_bytes(const std::string& bytes, const std::filesystem::path& dir,
                                const std::string& what) {
  auto impl = std::make_shared<Impl>();
  if (!impl->model.ParseFromString(bytes)) {
    throw FormatError(what + ": not an ONNX model (the protobuf message does not parse)");
  }
  if (!impl->model.has_graph()) throw FormatError(what + ": the model has no graph");
  impl->dir = dir;
  impl->what = what;
  return ModelFile(std::move(impl));
}

ModelFile ModelFile::read(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) throw FormatError(path.string() + ": is a directory, not an ONNX file");
  return from_bytes(read_file(path), path.parent_path(), path.string());
}

ImportedModel ModelFile::import(const ImportOptions& options) const {
  return ModelImport(impl_->model, impl_->dir, options, impl_->what).run();
}

std::vector<ValueInfo> ModelFile::inputs() const {
  const auto& graph = impl_->model.graph();
  std::set<std::string> initializers;
  for (const auto& t : graph.initializer()) initializers.insert(t.name());
  std::vector<ValueInfo> out;
  for (const auto& in : graph.input()) {
    if (initializers.count(in.name()) != 0) continue;
    const std::string what = impl_->what + ": input '" + in.name() + "'";
    if (!in.type().has_tensor_type()) throw UnsupportedError(what + " is not a tensor");
    ValueInfo info;
    info.name = in.name();
    info.type = elem_type_of(in.type().tensor_type().elem_type(), what);
    if (info.type != ElemType::f64) info.dtype = graph_dtype_of(info.type, what);
    for (const auto& d : in.type().tensor_type().shape().dim()) {
      info.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    out.push_back(std::move(info));
  }
  return out;
}

ImportedModel import_model_bytes(const std::string& bytes, const std::filesystem::path& dir,
                                 const ImportOptions& options, const std::string& what) {
  return ModelFile::from_bytes(bytes, dir, what).import(options);
}

ImportedModel import_model(const std::filesystem::path& path, const ImportOptions& options) {
  return ModelFile::read(path).import(options);
}

std::vector<ValueInfo> model_inputs(const std::filesystem::path& path) {
  return ModelFile::read(path).inputs();
}

RawTensor read_tensor_proto(const std::filesystem::path& path, std::string* name) {
  ::onnx::TensorProto t;
  if (!t.ParseFromString(read_file(path))) {
    throw FormatError(path.string() + ": not a serialized ONNX TensorProto");
  }
  if (name != nullptr) *name = t.name();
  return tensor_from_proto(t, path.parent_path(), path.string());
}

void ImportedModel::load_weights(Session& session) const {
  for (const auto& [name, w] : weights) session.set(name, w);
}

Array to_graph_value(const RawTensor& t, const ValueInfo& info, const std::string& what) {
  if (t.type != info.type) {
    throw Error(what + ": " + elem_type_name(t.type) + " values for an input of " +
                elem_type_name(info.type));
  }
  if (t.shape != info.shape) {
    throw ShapeError(what + ": shape " + shape_str(t.shape) + " for an input of shape " +
                     shape_str(info.shape));
  }
  Array a = host_array(t);
  a.dtype = info.dtype;
  if (auto i = info.dtype == DType::i32 ? first_outside_i32(a) : std::nullopt) {
    throw Error(what + ": element " + std::to_string(*i) + " does not fit 32-bit integers");
  }
  return a;
}

RawTensor from_graph_value(const Array& a, const ValueInfo& info, const std::string& what) {
  return from_array(a, info.type, what);
}

}  // namespace mn::onnx
