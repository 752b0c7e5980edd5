// The ONNX importer on models built here with the protobuf classes: values against the float64
// reference, initializers as trainable parameters, external data, shape binding, and every
// refusal naming the file, node, op and opset.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>

#include <meganeura/onnx.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/scratch_dir.h"

namespace mn {
namespace {

using ::onnx::TensorProto;

// A model under construction: opset 17, one graph.
struct ModelBuilder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g;

  explicit ModelBuilder(int64_t opset = 17) {
    m.set_ir_version(8);
    m.set_producer_name("import_test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g = m.mutable_graph();
    g->set_name("g");
  }
  void value_info(::onnx::ValueInfoProto* v, const std::string& name, int type,
                  const std::vector<std::string>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(type);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
      else dim->set_dim_param(d);
    }
  }
  void input(const std::string& name, const std::vector<std::string>& dims, int type = TensorProto::FLOAT) {
    value_info(g->add_input(), name, type, dims);
  }
  void output(const std::string& name, const std::vector<std::string>& dims = {}, int type = TensorProto::FLOAT) {
    auto* v = g->add_output();
    if (dims.empty()) {
      v->set_name(name);
      v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    } else {
      value_info(v, name, type, dims);
    }
  }
  TensorProto* initializer(const std::string& name, const Shape& shape, const std::vector<float>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
    return t;
  }
  void int_initializer(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  ::onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in,
                          const std::vector<std::string>& out, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(g->node_size()) : name);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  std::string bytes() const { return m.SerializeAsString(); }
  std::filesystem::path save(const test::ScratchDir& dir, const std::string& name = "model.onnx") const {
    return dir.write(name, bytes());
  }
};

// y = relu(x @ W^T + b) reshaped by a shape initializer, then softmax: a small classifier.
ModelBuilder classifier(const std::vector<std::string>& x_dims = {"batch", "4"}) {
  ModelBuilder b;
  b.input("x", x_dims);
  b.initializer("W", {3, 4}, {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f, 0.9f, 1.0f, -1.1f, 0.2f});
  b.initializer("b", {3}, {0.05f, -0.05f, 0.1f});
  b.int_initializer("shape", {-1, 3});
  auto* gemm = b.node("Gemm", {"x", "W", "b"}, {"h"}, "fc");
  ModelBuilder::attr(gemm, "transB", 1);
  b.node("Relu", {"h"}, {"r"});
  b.node("Reshape", {"r", "shape"}, {"flat"});
  auto* sm = b.node("Softmax", {"flat"}, {"probs"});
  ModelBuilder::attr(sm, "axis", -1);
  b.output("probs", {"batch", "3"});
  return b;
}

TEST(OnnxImport, ClassifierMatchesTheReferenceOnTheDevice) {
  onnx::ImportedModel m =
      onnx::import_model_bytes(classifier().bytes(), {}, {.input_shapes = {{"x", {2, 4}}}});
  EXPECT_EQ(m.opset, 17);
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].shape, (Shape{2, 4}));
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(m.weights.size(), 2u);  // W and b; the shape is a constant
  EXPECT_TRUE(m.graph.find_parameter("W").has_value());
  EXPECT_EQ(m.op_counts.at("Gemm"), 1);

  Array x({2, 4}, DType::f32, {1, 2, 3, 4, -1, 0.5, 2, -3});
  reference::Feeds feeds{{"x", x}};
  for (const auto& [name, w] : m.weights) feeds[name] = w;
  Array want = reference::evaluate(m.graph, feeds).at("probs");
  // By hand: relu(x W^T + b) then softmax, row 0.
  const double h0 = std::max(0.0, 0.1 - 0.4 + 0.9 + 1.6 + 0.05);
  const double h1 = std::max(0.0, -0.5 + 1.2 + 2.1 - 3.2 - 0.05);
  const double h2 = std::max(0.0, 0.9 + 2.0 - 3.3 + 0.8 + 0.1);
  const double z = std::exp(h0) + std::exp(h1) + std::exp(h2);
  EXPECT_NEAR(want.data[0], std::exp(h0) / z, 1e-6);

  auto s = build_session(m.graph);
  m.load_weights(*s);
  s->set("x", x);
  s->step();
  Array got = s->get("probs");
  for (size_t i = 0; i < want.data.size(); ++i) EXPECT_NEAR(got.data[i], want.data[i], 1e-5) << i;
}

TEST(OnnxImport, InitializersAreTrainableParameters) {
  onnx::ImportedModel m =
      onnx::import_model_bytes(classifier().bytes(), {}, {.input_shapes = {{"x", {4, 4}}}});
  Graph& g = m.graph;
  Tensor probs = g.tensor(*g.find_output("probs"));
  Tensor target = g.input("target", {4, 3});
  Tensor loss = mse_loss(probs, target);
  add_training_step(loss, Optimizer::sgd({.lr = 0.5}));
  auto s = build_session(g);
  m.load_weights(*s);
  Array x({4, 4}, DType::f32, {1, 2, 3, 4, -1, 0.5, 2, -3, 0.3, 0.1, -0.2, 1, 2, -1, 0, 0.5});
  Array t({4, 3}, DType::f32, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0});
  s->set("x", x);
  s->set("target", t);
  OptimizerStepper steps(Optimizer::sgd({.lr = 0.5}));
  steps.step(*s);
  const double first = s->get("loss").data[0];
  for (int i = 0; i < 20; ++i) steps.step(*s);
  EXPECT_LT(s->get("loss").data[0], first * 0.9);
  EXPECT_NE(s->get("W").data, m.weights.at("W").data);  // the weights moved
}

TEST(OnnxImport, SymbolicDimensionsMustBeBound) {
  try {
    onnx::import_model_bytes(classifier().bytes(), {}, {}, "m.onnx");
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("m.onnx: input 'x' axis 0 is symbolic ('batch')"), std::string::npos) << w;
  }
  EXPECT_THROW(onnx::import_model_bytes(classifier().bytes(), {}, {.input_shapes = {{"x", {2, 5}}}}),
               ShapeError);  // the fixed axis disagrees
  EXPECT_THROW(onnx::import_model_bytes(classifier().bytes(), {}, {.input_shapes = {{"y", {2, 4}}}}),
               Error);  // not an input
}

TEST(OnnxImport, UnsupportedOpNamesNodeOpAndOpset) {
  ModelBuilder b(13);
  b.input("x", {"2", "2"});
  b.node("Unique", {"x"}, {"y"}, "distinct");
  b.output("y");
  try {
    onnx::import_model_bytes(b.bytes(), {}, {}, "unique.onnx");
    ADD_FAILURE() << "no error";
  } catch (const onnx::UnsupportedError& e) {
    EXPECT_STREQ(e.what(), "unique.onnx: node 'distinct' (Unique, opset 13): op Unique is not supported");
  }
}

TEST(OnnxImport, ShapeErrorsNameTheNode) {
  ModelBuilder b;
  b.input("x", {"2", "3"});
  b.initializer("w", {4, 5}, std::vector<float>(20, 1.0f));
  b.node("MatMul", {"x", "w"}, {"y"}, "proj");
  b.output("y");
  try {
    onnx::import_model_bytes(b.bytes(), {}, {}, "bad.onnx");
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.onnx: node 'proj' (MatMul, opset 17): "), std::string::npos)
        << e.what();
  }
}

TEST(OnnxImport, CorruptAndMissingFiles) {
  test::ScratchDir dir("onnx");
  EXPECT_THROW(onnx::import_model(dir / "missing.onnx"), FormatError);
  const auto junk = dir.write("junk.onnx", "\xff\xff\xff\xff not a protobuf");
  try {
    onnx::import_model(junk);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("junk.onnx: not an ONNX model"), std::string::npos) << e.what();
  }
  // A model cut short.
  std::string bytes = classifier().bytes();
  const auto cut = dir.write("cut.onnx", bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(onnx::import_model(cut, {.input_shapes = {{"x", {2, 4}}}}), FormatError);
  // An initializer whose data does not fill its shape.
  ModelBuilder b = classifier();
  b.g->mutable_initializer(0)->add_dims(2);  // W: [3, 4, 2] with 12 floats
  try {
    onnx::import_model_bytes(b.bytes(), {}, {.input_shapes = {{"x", {2, 4}}}}, "w.onnx");
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("w.onnx: initializer 'W': 48 bytes of data for shape [3, 4, 2]"),
              std::string::npos)
        << e.what();
  }
}

TEST(OnnxImport, ExternalDataIsReadFromBesideTheModel) {
  test::ScratchDir dir("onnx");
  ModelBuilder b = classifier();
  // W's 12 floats at offset 8 of weights.bin.
  std::vector<float> w{0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f, 0.9f, 1.0f, -1.1f, 0.2f};
  std::string blob(8, '\0');
  blob.append(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  dir.write("weights.bin", blob);
  TensorProto* t = b.g->mutable_initializer(0);
  t->clear_float_data();
  t->set_data_location(TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", "weights.bin");
  add("offset", "8");
  add("length", "48");
  const auto path = b.save(dir);
  onnx::ImportedModel m = onnx::import_model(path, {.input_shapes = {{"x", {1, 4}}}});
  ASSERT_EQ(m.weights.at("W").data.size(), 12u);
  EXPECT_FLOAT_EQ(static_cast<float>(m.weights.at("W").data[10]), -1.1f);

  // Truncated: the file is shorter than offset + length.
  dir.write("weights.bin", blob.substr(0, 30));
  try {
    onnx::import_model(path, {.input_shapes = {{"x", {1, 4}}}});
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("initializer 'W': external data file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  // A location outside the model's folder.
  t->mutable_external_data(0)->set_value("../weights.bin");
  b.save(dir);
  EXPECT_THROW(onnx::import_model(path, {.input_shapes = {{"x", {1, 4}}}}), FormatError);
}

TEST(OnnxImport, ShapeArithmeticIsEvaluatedWhileImporting) {
  // y = reshape(x, concat(shape(x)[0:1], [-1])): the export pattern of torch's flatten.
  ModelBuilder b;
  b.input("x", {"n", "2", "3"});
  b.node("Shape", {"x"}, {"s"});
  b.int_initializer("zero", {0});
  b.int_initializer("one", {1});
  b.int_initializer("minus_one", {-1});
  b.node("Slice", {"s", "zero", "one"}, {"n_only"});
  auto* cat = b.node("Concat", {"n_only", "minus_one"}, {"target"});
  ModelBuilder::attr(cat, "axis", 0);
  b.node("Reshape", {"x", "target"}, {"y"});
  b.output("y");
  onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {.input_shapes = {{"x", {5, 2, 3}}}});
  EXPECT_EQ(m.outputs[0].shape, (Shape{5, 6}));
  // Only the input and the reshape's view reach the graph: the shape arithmetic was folded.
  int reshapes = 0;
  for (const auto& n : m.graph.nodes()) reshapes += n.op_name() == "reshape";
  EXPECT_EQ(reshapes, 1);
}

TEST(OnnxImport, ShapeValuesFromInputsNeedTheirValues) {
  ModelBuilder b;
  b.input("x", {"6"});
  b.input("shape", {"2"}, TensorProto::INT64);
  b.node("Reshape", {"x", "shape"}, {"y"}, "r");
  b.output("y");
  try {
    onnx::import_model_bytes(b.bytes(), {}, {}, "r.onnx");
    ADD_FAILURE() << "no error";
  } catch (const onnx::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("shape ('shape') must be known when the graph is built; it is "
                                         "the model input 'shape'"),
              std::string::npos)
        << e.what();
  }
  RawTensor v = from_array(Array({2}, DType::i32, {2, 3}), ElemType::i64);
  onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {.input_values = {{"shape", v}}});
  EXPECT_EQ(m.outputs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(m.specialized_inputs, std::vector<std::string>{"shape"});
  ASSERT_EQ(m.inputs.size(), 1u);  // "shape" is not a graph input
  EXPECT_EQ(m.inputs[0].name, "x");
}

TEST(OnnxImport, IntegerAndBoolValuesRoundTrip) {
  ModelBuilder b;
  b.input("a", {"3"}, TensorProto::INT64);
  b.input("c", {"3"}, TensorProto::INT64);
  b.node("Add", {"a", "c"}, {"sum"});
  b.node("Greater", {"a", "c"}, {"more"});
  b.output("sum", {}, TensorProto::INT64);
  b.output("more", {}, TensorProto::BOOL);
  onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {});
  auto s = build_session(m.graph);
  RawTensor a = from_array(Array({3}, DType::i32, {5, -7, 100000}), ElemType::i64);
  RawTensor c = from_array(Array({3}, DType::i32, {1, 2, 3}), ElemType::i64);
  s->set("a", onnx::to_graph_value(a, m.inputs[0], "a"));
  s->set("c", onnx::to_graph_value(c, m.inputs[1], "c"));
  s->step();
  RawTensor sum = onnx::from_graph_value(s->get("sum"), m.outputs[0], "sum");
  RawTensor more = onnx::from_graph_value(s->get("more"), m.outputs[1], "more");
  EXPECT_EQ(sum.type, ElemType::i64);
  EXPECT_EQ(sum.value(2), 100003);
  EXPECT_EQ(more.type, ElemType::boolean);
  EXPECT_EQ(more.value(0), 1);
  EXPECT_EQ(more.value(1), 0);
  // An INT64 beyond 32 bits is refused, naming the element.
  RawTensor big = from_array(Array({3}, DType::f32, {1, 5e9, 2}), ElemType::i64);
  EXPECT_THROW(onnx::to_graph_value(big, m.inputs[0], "a"), Error);
}

TEST(OnnxImport, OpsetsOutsideTheSupportedRangeAreRefused) {
  ModelBuilder b(22);
  b.input("x", {"2"});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  EXPECT_THROW(onnx::import_model_bytes(b.bytes(), {}, {}), onnx::UnsupportedError);
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// Ops whose backend-suite tests are all DOUBLE (which the GPU does not compute), checked here in
// FLOAT against sums written out by hand.
Array run_single(ModelBuilder& b, const std::string& x_name, const Array& x, const std::string& out) {
  onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {});
  auto s = build_session(m.graph);
  m.load_weights(*s);
  s->set(x_name, x);
  s->step();
  return s->get(out);
}

TEST(OnnxImport, CumSumInEveryDirection) {
  const Array x({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6});
  const std::vector<std::pair<std::pair<int, int>, std::vector<double>>> cases{
      {{0, 0}, {1, 3, 6, 4, 9, 15}},
      {{1, 0}, {0, 1, 3, 0, 4, 9}},
      {{0, 1}, {6, 5, 3, 15, 11, 6}},
      {{1, 1}, {5, 3, 0, 11, 6, 0}},
  };
  for (const auto& [flags, want] : cases) {
    ModelBuilder b(14);
    b.input("x", {"2", "3"});
    b.int_initializer("axis", {1});
    b.g->mutable_initializer(0)->clear_dims();  // a scalar axis
    auto* n = b.node("CumSum", {"x", "axis"}, {"y"});
    ModelBuilder::attr(n, "exclusive", flags.first);
    ModelBuilder::attr(n, "reverse", flags.second);
    b.output("y");
    Array y = run_single(b, "x", x, "y");
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(y.data[i], want[i], 1e-6) << "exclusive " << flags.first << " reverse " << flags.second;
    }
  }
}

TEST(OnnxImport, ReduceLogSumExpIsStable) {
  ModelBuilder b(13);
  b.input("x", {"2", "3"});
  auto* n = b.node("ReduceLogSumExp", {"x"}, {"y"});
  auto* a = n->add_attribute();
  a->set_name("axes");
  a->set_type(::onnx::AttributeProto::INTS);
  a->add_ints(1);
  ModelBuilder::attr(n, "keepdims", 0);
  b.output("y");
  const Array x({2, 3}, DType::f32, {1, 2, 3, 1000, 1000, 999});
  Array y = run_single(b, "x", x, "y");
  ASSERT_EQ(y.shape, (Shape{2}));
  EXPECT_NEAR(y.data[0], std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-5);
  EXPECT_NEAR(y.data[1], 1000 + std::log(2 + std::exp(-1.0)), 1e-3);
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// Forms of opsets 18 to 21 (what current PyTorch exports).
TEST(OnnxImport, NewerOpsetForms) {
  ModelBuilder b(18);
  b.input("x", {"2", "7"});
  b.int_initializer("axes", {1});
  b.node("ReduceMean", {"x", "axes"}, {"m"});
  auto* split = b.node("Split", {"x"}, {"a", "b", "c"});
  ModelBuilder::attr(split, "axis", 1);
  ModelBuilder::attr(split, "num_outputs", 3);
  b.output("m");
  b.output("c");
  onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {});
  EXPECT_EQ(m.outputs[0].shape, (Shape{2, 1}));
  EXPECT_EQ(m.outputs[1].shape, (Shape{2, 1}));  // 7 = 3 + 3 + 1
  auto s = build_session(m.graph);
  Array x({2, 7}, DType::f32, {1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 14});
  s->set("x", x);
  s->step();
  EXPECT_NEAR(s->get("m").data[0], 4.0, 1e-6);
  EXPECT_NEAR(s->get("c").data[1], 14.0, 1e-6);
}

TEST(OnnxImport, GroupNormalizationScalesPerGroupThenPerChannel) {
  // x [1, 4, 2]: groups {c0, c1} and {c2, c3}; each group normalized over its 4 values.
  const Array x({1, 4, 2}, DType::f32, {1, 2, 3, 4, 10, 10, 10, 14});
  auto normalized = [&](int c, int i) {
    const int g = c / 2;
    double mean = 0, var = 0;
    for (int k = 0; k < 4; ++k) mean += x.data[static_cast<size_t>(g * 4 + k)] / 4;
    for (int k = 0; k < 4; ++k) var += std::pow(x.data[static_cast<size_t>(g * 4 + k)] - mean, 2) / 4;
    return (x.data[static_cast<size_t>(c * 2 + i)] - mean) / std::sqrt(var + 1e-5);
  };
  for (int opset : {18, 21}) {
    ModelBuilder b(opset);
    b.input("x", {"1", "4", "2"});
    const std::vector<float> scale = opset == 18 ? std::vector<float>{2, 3} : std::vector<float>{2, 2, 3, 3};
    const std::vector<float> bias = opset == 18 ? std::vector<float>{1, -1} : std::vector<float>{1, 1, -1, -1};
    b.initializer("scale", {static_cast<int64_t>(scale.size())}, scale);
    b.initializer("bias", {static_cast<int64_t>(bias.size())}, bias);
    auto* n = b.node("GroupNormalization", {"x", "scale", "bias"}, {"y"});
    ModelBuilder::attr(n, "num_groups", 2);
    b.output("y");
    Array y = run_single(b, "x", x, "y");
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 2; ++i) {
        const double want = normalized(c, i) * (c < 2 ? 2 : 3) + (c < 2 ? 1 : -1);
        EXPECT_NEAR(y.data[static_cast<size_t>(c * 2 + i)], want, 1e-4) << "opset " << opset;
      }
    }
  }
}

TEST(OnnxImport, GeluOfOpset20) {
  ModelBuilder b(20);
  b.input("x", {"4"});
  b.node("Gelu", {"x"}, {"y"});
  b.output("y");
  const Array x({4}, DType::f32, {-2, -0.5, 0.5, 3});
  Array y = run_single(b, "x", x, "y");
  for (size_t i = 0; i < 4; ++i) {
    const double v = x.data[i];
    EXPECT_NEAR(y.data[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-5);
  }
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// Einsum's backend tests are DOUBLE only: here in FLOAT against the sums written out.
TEST(OnnxImport, EinsumAsSumsPermutesAndOneProduct) {
  auto einsum = [](const std::string& eq, const std::vector<std::pair<Array, std::vector<std::string>>>& ops) {
    ModelBuilder b(12);
    std::vector<std::string> names;
    for (size_t i = 0; i < ops.size(); ++i) {
      names.push_back("x" + std::to_string(i));
      b.input(names.back(), ops[i].second);
    }
    auto* n = b.node("Einsum", names, {"y"});
    auto* a = n->add_attribute();
    a->set_name("equation");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(eq);
    b.output("y");
    onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {});
    auto s = build_session(m.graph);
    for (size_t i = 0; i < ops.size(); ++i) s->set(names[i], ops[i].first);
    s->step();
    return s->get("y");
  };
  const Array a({2, 2, 3}, DType::f32, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const Array b({2, 3, 2}, DType::f32, {1, 0, 0, 1, 1, 1, 2, 0, 0, 2, 1, -1});
  // Batched product: bij,bjk->bik.
  Array y = einsum("bij,bjk->bik", {{a, {"2", "2", "3"}}, {b, {"2", "3", "2"}}});
  ASSERT_EQ(y.shape, (Shape{2, 2, 2}));
  const std::vector<double> want{4, 5, 10, 11, 23, 7, 32, 10};  // numpy.einsum
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y.data[i], want[i], 1e-5) << i;
  // Transpose, sum over one letter, and the implicit output (letters once, alphabetical).
  Array t = einsum("bij->bji", {{a, {"2", "2", "3"}}});
  EXPECT_EQ(t.shape, (Shape{2, 3, 2}));
  EXPECT_NEAR(t.data[1], 4, 1e-6);
  Array s = einsum("bij->bi", {{a, {"2", "2", "3"}}});
  EXPECT_NEAR(s.data[3], 33, 1e-5);
  const Array v({3}, DType::f32, {1, 2, 3});
  Array inner = einsum("i,i", {{v, {"3"}}, {v, {"3"}}});
  EXPECT_EQ(inner.shape, Shape{});
  EXPECT_NEAR(inner.data[0], 14, 1e-5);
  Array outer = einsum("i,j", {{v, {"3"}}, {v, {"3"}}});
  EXPECT_EQ(outer.shape, (Shape{3, 3}));
  EXPECT_NEAR(outer.data[5], 6, 1e-5);
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// DFT with a dft_length past the signal (zero-padded) and onesided output, against the sums
// written out in double; the node suite's DFT tests use neither.
TEST(OnnxImport, OnesidedPaddedDftMatchesTheSums) {
  ModelBuilder b(17);
  b.input("x", {"2", "6", "1"});
  b.int_initializer("length", {8});
  b.g->mutable_initializer(0)->clear_dims();
  auto* n = b.node("DFT", {"x", "length"}, {"y"});
  ModelBuilder::attr(n, "onesided", 1);
  b.output("y");
  const Array x({2, 6, 1}, DType::f32, {0.5, -1.0, 2.0, 0.25, 3.0, -0.75, 1, 2, 3, 4, 5, 6});
  Array y = run_single(b, "x", x, "y");
  ASSERT_EQ(y.shape, (Shape{2, 5, 2}));
  const double pi = 3.14159265358979323846;
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t k = 0; k < 5; ++k) {
      double re = 0, im = 0;
      for (int64_t j = 0; j < 6; ++j) {
        re += x.data[static_cast<size_t>(r * 6 + j)] * std::cos(-2 * pi * double(j * k) / 8);
        im += x.data[static_cast<size_t>(r * 6 + j)] * std::sin(-2 * pi * double(j * k) / 8);
      }
      EXPECT_NEAR(y.data[static_cast<size_t>((r * 5 + k) * 2)], re, 1e-5) << r << "," << k;
      EXPECT_NEAR(y.data[static_cast<size_t>((r * 5 + k) * 2 + 1)], im, 1e-5) << r << "," << k;
    }
  }
}

// Ops whose output shape a value decides refuse that value when it is computed at run time,
// and malformed operands fail naming the node.
TEST(OnnxImport, CompressAndReverseSequenceNeedTheirValues) {
  {
    ModelBuilder b(11);
    b.input("x", {"3", "2"});
    b.input("c", {"3"}, TensorProto::BOOL);
    auto* n = b.node("Compress", {"x", "c"}, {"y"}, "pick");
    ModelBuilder::attr(n, "axis", 0);
    b.output("y");
    try {
      onnx::import_model_bytes(b.bytes(), {}, {}, "c.onnx");
      ADD_FAILURE() << "no error";
    } catch (const onnx::UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("condition ('c') must be known"), std::string::npos)
          << e.what();
    }
    RawTensor v = from_array(Array({3}, DType::f32, {1, 0, 1}), ElemType::boolean);
    onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {.input_values = {{"c", v}}});
    EXPECT_EQ(m.outputs[0].shape, (Shape{2, 2}));
  }
  {
    ModelBuilder b(10);
    b.input("x", {"4", "2"});
    b.int_initializer("lens", {4, 5});
    auto* n = b.node("ReverseSequence", {"x", "lens"}, {"y"}, "rev");
    ModelBuilder::attr(n, "time_axis", 0);
    ModelBuilder::attr(n, "batch_axis", 1);
    b.output("y");
    try {
      onnx::import_model_bytes(b.bytes(), {}, {}, "r.onnx");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'rev' (ReverseSequence, opset 10): a sequence length "
                                           "outside [0, 4]"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// The optimizer ops of ai.onnx.preview.training version 1, in a model importing that domain
// alone, compute on the device with R and T as inputs; other versions and domains are refused.
TEST(OnnxImport, TrainingDomainOptimizers) {
  auto model = [](int64_t version, const std::string& domain) {
    ModelBuilder b;
    b.m.clear_opset_import();
    auto* o = b.m.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
    for (const char* n : {"R", "X", "G", "V"}) b.input(n, {n[0] == 'R' ? "1" : "2"});
    b.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->clear_dim();
    b.input("T", {}, TensorProto::INT64);
    auto* n = b.node("Momentum", {"R", "T", "X", "G", "V"}, {"X_new", "V_new"}, "sgd");
    n->set_domain(domain);
    ModelBuilder::attr(n, "mode", 0);
    n->mutable_attribute(0)->set_type(::onnx::AttributeProto::STRING);
    n->mutable_attribute(0)->set_s("nesterov");
    auto* alpha = n->add_attribute();
    alpha->set_name("alpha");
    alpha->set_type(::onnx::AttributeProto::FLOAT);
    alpha->set_f(0.5f);
    b.output("X_new");
    b.output("V_new");
    return b;
  };
  ModelBuilder ok = model(1, "ai.onnx.preview.training");
  onnx::ImportedModel m = onnx::import_model_bytes(ok.bytes(), {}, {}, "m.onnx");
  auto session = build_session(m.graph);
  session->set("R", Array({}, DType::f32, {0.1}));
  session->set("T", Array({}, DType::i32, {3}));
  session->set("X", Array({2}, DType::f32, {1.0, 2.0}));
  session->set("G", Array({2}, DType::f32, {0.5, -1.0}));
  session->set("V", Array({2}, DType::f32, {0.2, 0.4}));
  session->step();
  // beta 0 after the first step: v' = 0.5 v; x' = x - r (g + 0.5 v').
  const Array x = session->get("X_new"), v = session->get("V_new");
  EXPECT_NEAR(v.data[0], 0.1, 1e-6);
  EXPECT_NEAR(v.data[1], 0.2, 1e-6);
  EXPECT_NEAR(x.data[0], 1.0 - 0.1 * (0.5 + 0.05), 1e-6);
  EXPECT_NEAR(x.data[1], 2.0 - 0.1 * (-1.0 + 0.1), 1e-6);
  for (const auto& [version, domain, message] :
       std::vector<std::tuple<int64_t, std::string, std::string>>{
           {2, "ai.onnx.preview.training", "version 2 of ai.onnx.preview.training"},
           {1, "com.example", "uses only the domains com.example"}}) {
    try {
      onnx::import_model_bytes(model(version, domain).bytes(), {}, {}, "m.onnx");
      ADD_FAILURE() << "no error for " << domain;
    } catch (const onnx::UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// A shape computed on the graph from a model input (n + 1 rows) is evaluated while importing
// when the input's value is given, and the graph is specialized to it; without it, refused.
TEST(OnnxImport, ShapeValuesComputedFromGivenInputs) {
  ModelBuilder b(13);
  b.input("x", {"12"});
  b.input("n", {"1"}, TensorProto::INT64);
  b.int_initializer("one", {1});
  b.int_initializer("rest", {-1});
  b.node("Add", {"n", "one"}, {"rows"});
  auto* concat = b.node("Concat", {"rows", "rest"}, {"shape"});
  ModelBuilder::attr(concat, "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"}, "r");
  b.output("y");
  try {
    onnx::import_model_bytes(b.bytes(), {}, {}, "m.onnx");
    ADD_FAILURE() << "no error";
  } catch (const onnx::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("shape ('shape') must be known when the graph is built; it "
                                         "is computed at run time from model inputs whose values "
                                         "are not given"),
              std::string::npos)
        << e.what();
  }
  RawTensor n = from_array(Array({1}, DType::i32, {2}), ElemType::i64);
  onnx::ImportedModel m = onnx::import_model_bytes(b.bytes(), {}, {.input_values = {{"n", n}}});
  EXPECT_EQ(m.outputs[0].shape, (Shape{3, 4}));
  EXPECT_EQ(m.specialized_inputs, std::vector<std::string>{"n"});
  std::vector<std::string> inputs;
  for (const auto& i : m.inputs) inputs.push_back(i.name);
  EXPECT_EQ(inputs, std::vector<std::string>{"x"});
  auto session = build_session(m.graph);
  Array x({12}, DType::f32);
  for (size_t i = 0; i < 12; ++i) x.data[i] = static_cast<double>(i);
  session->set("x", x);
  session->step();
  EXPECT_EQ(session->get("y").data, x.data);
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// TfIdfVectorizer's IDF and TFIDF modes with weights (the node suite has TF only): unigrams 3
// and 7, bigram (3, 7) with one skip allowed, placed at indexes 2, 0, 1.
TEST(OnnxImport, TfIdfWeightsInEveryMode) {
  const Array x({2, 5}, DType::i32, {3, 7, 3, 9, 7, 1, 3, 3, 3, 2});
  // Row 0: 3 twice, 7 twice, (3, 7) at positions 0-1 (skip 0) and 2-4 (skip 1; 0-4 would need
  // three). Row 1: 3 three times. Per row: (3, 7), 7, 3 at output indexes 0, 1, 2.
  const std::vector<double> tf{2, 2, 2, 0, 0, 3};
  for (const std::string mode : {"TF", "IDF", "TFIDF"}) {
    ModelBuilder b(9);
    b.input("x", {"2", "5"}, TensorProto::INT32);
    auto* n = b.node("TfIdfVectorizer", {"x"}, {"y"});
    auto ints = [&](const std::string& name, std::vector<int64_t> v) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::INTS);
      for (int64_t i : v) a->add_ints(i);
    };
    ints("pool_int64s", {3, 7, 3, 7});
    ints("ngram_counts", {0, 2});
    ints("ngram_indexes", {2, 1, 0});
    ModelBuilder::attr(n, "min_gram_length", 1);
    ModelBuilder::attr(n, "max_gram_length", 2);
    ModelBuilder::attr(n, "max_skip_count", 1);
    auto* m = n->add_attribute();
    m->set_name("mode");
    m->set_type(::onnx::AttributeProto::STRING);
    m->set_s(mode);
    auto* w = n->add_attribute();
    w->set_name("weights");
    w->set_type(::onnx::AttributeProto::FLOATS);
    for (float v : {0.5f, 2.0f, 4.0f}) w->add_floats(v);
    b.output("y");
    Array y = run_single(b, "x", x, "y");
    ASSERT_EQ(y.shape, (Shape{2, 3}));
    const std::vector<double> weight_at{4.0, 2.0, 0.5};  // by output index
    for (size_t i = 0; i < 6; ++i) {
      double want = tf[i];
      if (mode == "IDF") want = std::min(want, 1.0) * weight_at[i % 3];
      if (mode == "TFIDF") want *= weight_at[i % 3];
      EXPECT_NEAR(y.data[i], want, 1e-6) << mode << " " << i;
    }
  }
}

}  // namespace
}  // namespace mn
