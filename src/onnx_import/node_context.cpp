// NodeContext: a converter's view of its node (inputs, attributes, outputs, errors).
#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

NodeContext::NodeContext(Importer& importer, const ::onnx::NodeProto& node, int64_t opset,
                         Graph& graph, bool folding)
    : importer_(importer), node_(node), opset_(opset), graph_(graph), folding_(folding) {
  outputs_.resize(static_cast<size_t>(node.output_size()));
}

std::string NodeContext::where() const {
  std::string name = node_.name().empty()
                         ? (node_.output_size() > 0 ? "producing '" + node_.output(0) + "'" : "")
                         : "'" + node_.name() + "'";
  return "node " + name + " (" + node_.op_type() + ", opset " + std::to_string(opset_) + ")";
}

size_t NodeContext::input_count() const { return static_cast<size_t>(node_.input_size()); }

bool NodeContext::has(size_t i) const {
  return i < input_count() && !node_.input(static_cast<int>(i)).empty();
}

const Value& NodeContext::value(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  return importer_.value(node_.input(static_cast<int>(i)), where());
}

Tensor NodeContext::in(size_t i) {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  Value& v = importer_.value(node_.input(static_cast<int>(i)), where());
  return importer_.materialize(v, graph_, where());
}

Tensor NodeContext::in_float(size_t i) {
  Tensor t = in(i);
  return is_float(t.dtype()) ? t : cast(t, DType::f32);
}

bool NodeContext::is_known(size_t i) const { return has(i) && value(i).host.has_value(); }

const Array& NodeContext::known(size_t i, const std::string& what) {
  const Value& v = value(i);
  if (!v.host && v.source == Value::Source::computed && !folding_ && v.tensor.valid() &&
      &v.tensor.graph() == &graph_) {
    if (const Array* a = importer_.evaluate_from_given_inputs(v.tensor.id())) return *a;
  }
  if (!v.host) {
    std::string hint = v.source == Value::Source::input
                           ? "; it is the model input '" + v.name +
                                 "': give its value when importing (ImportOptions::input_values)"
                           : "; it is computed at run time from model inputs whose values are "
                             "not given (ImportOptions::input_values) or from parameters";
    unsupported(what + " ('" + v.name + "') must be known when the graph is built" + hint);
  }
  if (v.source == Value::Source::input) importer_.note_specialized(v.name);
  return *v.host;
}

std::vector<int64_t> NodeContext::known_ints(size_t i, const std::string& what) {
  const Array& a = known(i, what);
  std::vector<int64_t> out;
  out.reserve(a.data.size());
  for (double d : a.data) {
    if (std::isnan(d)) fail(what + " holds NaN where integers are expected");
    // INT64's extremes (Slice's "to the end") arrive as +-2^63, which int64 cannot hold.
    if (d >= 9.2e18) out.push_back(std::numeric_limits<int64_t>::max());
    else if (d <= -9.2e18) out.push_back(std::numeric_limits<int64_t>::min());
    else out.push_back(static_cast<int64_t>(d));
  }
  return out;
}

double NodeContext::known_scalar(size_t i, const std::string& what) {
  const Array& a = known(i, what);
  if (a.data.size() != 1) fail(what + " must hold one value, not shape " + shape_str(a.shape));
  return a.data[0];
}

const ::onnx::AttributeProto* NodeContext::attr(const std::string& name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) {
      if (!a.ref_attr_name().empty()) unsupported("attribute '" + name + "' refers to a function attribute");
      return &a;
    }
  }
  return nullptr;
}

bool NodeContext::has_attr(const std::string& name) const { return attr(name) != nullptr; }

namespace {
void check_kind(const NodeContext& c, const ::onnx::AttributeProto& a,
                ::onnx::AttributeProto::AttributeType want, const char* kind) {
  // Old models leave `type` unset; the field present is then what counts.
  if (a.type() != ::onnx::AttributeProto::UNDEFINED && a.type() != want) {
    c.fail("attribute '" + a.name() + "' is not " + kind);
  }
}
}  // namespace

std::optional<int64_t> NodeContext::attr_int(const std::string& name) const {
  const auto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  check_kind(*this, *a, ::onnx::AttributeProto::INT, "an integer");
  return a->i();
}

int64_t NodeContext::attr_int(const std::string& name, int64_t fallback) const {
  return attr_int(name).value_or(fallback);
}

double NodeContext::attr_float(const std::string& name, double fallback) const {
  const auto* a = attr(name);
  if (a == nullptr) return fallback;
  check_kind(*this, *a, ::onnx::AttributeProto::FLOAT, "a float");
  return a->f();
}

std::optional<std::vector<int64_t>> NodeContext::attr_ints_opt(const std::string& name) const {
  const auto* a = attr(name);
  if (a == nullptr) return std::nullopt;
  check_kind(*this, *a, ::onnx::AttributeProto::INTS, "a list of integers");
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<int64_t> NodeContext::attr_ints(const std::string& name) const {
  return attr_ints_opt(name).value_or(std::vector<int64_t>{});
}

std::vector<float> NodeContext::attr_floats(const std::string& name) const {
  const auto* a = attr(name);
  if (a == nullptr) return {};
  check_kind(*this, *a, ::onnx::AttributeProto::FLOATS, "a list of floats");
  return {a->floats().begin(), a->floats().end()};
}

std::string NodeContext::attr_string(const std::string& name, const std::string& fallback) const {
  const auto* a = attr(name);
  if (a == nullptr) return fallback;
  check_kind(*this, *a, ::onnx::AttributeProto::STRING, "a string");
  return a->s();
}

const ::onnx::TensorProto* NodeContext::attr_tensor(const std::string& name) const {
  const auto* a = attr(name);
  if (a == nullptr) return nullptr;
  check_kind(*this, *a, ::onnx::AttributeProto::TENSOR, "a tensor");
  return &a->t();
}

size_t NodeContext::output_count() const { return static_cast<size_t>(node_.output_size()); }

bool NodeContext::wants(size_t i) const {
  return i < output_count() && !node_.output(static_cast<int>(i)).empty();
}

void NodeContext::out(size_t i, Tensor t, ElemType type) {
  if (!wants(i)) return;
  const DType want = graph_dtype_of(type, where() + " output " + std::to_string(i));
  if (t.dtype() != want) t = cast(t, want);
  Value v;
  v.name = node_.output(static_cast<int>(i));
  v.source = Value::Source::computed;
  v.type = type;
  v.shape = t.shape();
  v.tensor = t;
  outputs_[i] = std::move(v);
}

void NodeContext::out_known(size_t i, Array a, ElemType type) {
  if (!wants(i)) return;
  Value v;
  v.name = node_.output(static_cast<int>(i));
  v.source = Value::Source::known;
  v.type = type;
  v.shape = a.shape;
  a.dtype = type == ElemType::f64 ? DType::f32 : graph_dtype_of(type, where());
  v.host = std::move(a);
  outputs_[i] = std::move(v);
}

void NodeContext::unsupported(const std::string& why) const {
  throw UnsupportedError(where() + ": " + why);
}

void NodeContext::fail(const std::string& why) const { throw FormatError(where() + ": " + why); }

int NodeContext::axis(int64_t a, int rank, const char* what) const {
  if (a < -rank || a >= std::max(rank, 1)) {
    fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " +
         std::to_string(rank));
  }
  return static_cast<int>(a < 0 ? a + rank : a);
}

Tensor NodeContext::scalar(double v, const Tensor& like) { return graph_.scalar(v, like.dtype()); }

void NodeContext::host_limit(int64_t elements, const std::string& what) const {
  constexpr int64_t kLimit = int64_t{1} << 24;
  if (elements > kLimit) {
    unsupported(what + " of " + std::to_string(elements) +
                " elements computed while importing (at most 2^24)");
  }
}

}  // namespace mn::onnx
