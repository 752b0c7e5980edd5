// The module tree: PyTorch's state_dict keys, modes, seeds, graph tensors, and the errors of bad
// declarations, bad inputs and strict loading.
#include <gtest/gtest.h>

#include <meganeura/nn.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/scratch_dir.h"

namespace mn {
namespace {

// "what" throws an mn::Error whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    for (const std::string& s : fragments)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << " lacks " << s;
  }
}

struct Net : nn::Module {
  Net() : Module("Net") {
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    layers->push_back(std::make_shared<nn::Conv2d>(1, 2, std::array<int64_t, 2>{3, 3}));
    layers->push_back(std::make_shared<nn::BatchNorm2d>(2));
    head = register_module("head", std::make_shared<nn::Sequential>());
    head->push_back(std::make_shared<nn::Flatten>());
    head->push_back(std::make_shared<nn::Dropout>(0.5));
    head->push_back(std::make_shared<nn::Linear>(2 * 4 * 4, 3));
  }
  Tensor forward(Tensor x) override {
    return head->forward(
        layers->at<nn::BatchNorm2d>(1)->forward(layers->at<nn::Conv2d>(0)->forward(x)));
  }
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::Sequential> head;
};

std::vector<std::string> keys(const std::vector<nn::StateEntry>& es) {
  std::vector<std::string> out;
  for (const auto& e : es) out.push_back(e.key);
  return out;
}

TEST(NnModule, KeysFollowPyTorchStateDict) {
  Net net;
  EXPECT_EQ(
      keys(net.state_entries()),
      (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                "layers.1.bias", "layers.1.running_mean", "layers.1.running_var",
                                "layers.1.num_batches_tracked", "head.2.weight", "head.2.bias"}));
  EXPECT_EQ(keys(net.named_buffers()).size(), 3u);
  // Keys of a subtree are relative to it; graph names stay those of the whole tree.
  auto sub = net.head->named_children()[2].second->state_entries();
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub[0].key, "weight");
  EXPECT_EQ(sub[0].graph_name, "head.2.weight");
  EXPECT_EQ(net.layers->at<nn::BatchNorm2d>(1)->path(), "layers.1");
  const nn::Slot count = net.named_buffers()[2].slot;  // a copy: named_buffers() is a temporary
  EXPECT_EQ(count.type.dtype, DType::i32);
  EXPECT_EQ(count.file_type, ElemType::i64);
}

TEST(NnModule, GraphTensorsAreNamedByTheTreeAndShared) {
  Net net;
  Graph g;
  Tensor x = g.input("x", {2, 1, 6, 6});
  g.output("a", net.forward(x));
  g.output("b", net.eval().forward(x));  // a second use finds the same parameters
  EXPECT_TRUE(g.find_parameter("layers.0.weight"));
  EXPECT_TRUE(g.find_state("layers.1.running_var"));
  EXPECT_EQ(g.parameters().size(), 6u);
  // The batch norm's three buffers and the graph's dropout step counter.
  EXPECT_EQ(g.states().size(), 4u);
  EXPECT_TRUE(g.find_state("nn/dropout_step"));
  // Only the training forward updates the running statistics (and counts dropout steps).
  EXPECT_EQ(g.assignments().size(), 4u);
  EXPECT_FALSE(net.training());
  EXPECT_FALSE(net.head->named_children()[1].second->training());
}

TEST(NnModule, InitializationDependsOnSeedAndName) {
  auto values = [](uint64_t seed) {
    nn::Sequential s;
    s.push_back(std::make_shared<nn::Linear>(4, 4));
    s.push_back(std::make_shared<nn::Linear>(4, 4));
    s.seed(seed);
    Graph g;
    g.output("y", s.forward(g.input("x", {1, 4})));
    auto session = build_session(g);
    return std::make_pair(session->get("0.weight").data, session->get("1.weight").data);
  };
  const auto a = values(1), b = values(1), c = values(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.first, a.second);  // two layers of one shape differ
  EXPECT_NE(a.first, c.first);
  for (double v : a.first) EXPECT_LE(std::abs(v), 0.5);  // ±1/√in
}

TEST(NnModule, DeclarationErrorsNameTheModule) {
  auto lin = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential a, b;
  a.push_back(lin);
  expect_error([&] { b.push_back(lin); }, {"Linear '0'", "already has a parent"});
  expect_error([] { nn::Linear(0, 3); }, {"Linear", "in_features is 0"});
  expect_error([] { nn::MultiheadAttention(10, 3); }, {"embed_dim 10", "num_heads 3"});
  expect_error([] { nn::Dropout(1.0); }, {"Dropout", "p is 1"});
  expect_error([] { nn::BatchNorm2d(4, 1e-5, 2.0); }, {"BatchNorm2d", "momentum is 2"});
  expect_error([] { nn::LayerNorm(Shape{}); }, {"LayerNorm", "normalized_shape is empty"});
  expect_error(
      [] {
        nn::Conv2d(3, 4, {3, 3}, nn::Conv2dConfig{.groups = 2});
      },
      {"Conv2d", "multiples of groups 2"});
  expect_error([] { nn::Conv1d(4, 6, 0); }, {"Conv1d", "kernel_size is 0"});
  expect_error([] { nn::Conv1d(4, 6, 3, nn::Conv1dConfig{.padding = -1}); },
               {"Conv1d", "padding is negative"});
  expect_error([&] { a.child("7"); }, {"Sequential (root)", "no child '7'"});
  expect_error([] { nn::Embedding(10, 4, 10); }, {"Embedding", "padding_idx 10", "[-10, 10)"});
  expect_error([] { nn::Embedding(10, 4, -11); }, {"padding_idx -11"});
}

// A fresh Embedding's padding row is zero (PyTorch's initialization), the others are not.
TEST(NnModule, EmbeddingPaddingRowStartsAtZero) {
  nn::Embedding emb(5, 3, -2);
  EXPECT_EQ(emb.padding_idx, 3);
  const Array w = initialize(emb.state_entries().at(0).slot.init, {5, 3});
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t c = 0; c < 3; ++c) {
      const double v = w.data[static_cast<size_t>(r * 3 + c)];
      if (r == 3) EXPECT_EQ(v, 0.0);
      else EXPECT_NE(v, 0.0);
    }
  }
}

TEST(NnModule, BadInputsNameTheModule) {
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Linear>(4, 3));
  s.push_back(std::make_shared<nn::Linear>(5, 2));
  Graph g;
  expect_error([&] { s.forward(g.input("x", {2, 4})); }, {"Linear '1'", "[..., 5]", "f32[2, 3]"});
  nn::Embedding emb(10, 4);
  expect_error([&] { emb.forward(g.input("i", {3})); }, {"Embedding", "i32 indices"});
  nn::BatchNorm2d bn(3);
  expect_error([&] { bn.forward(g.input("img", {2, 4, 5, 5})); }, {"BatchNorm2d", "3 channels"});
  nn::Conv1d conv(80, 8, 3);
  expect_error([&] { conv.forward(g.input("mel", {1, 128, 300})); },
               {"Conv1d", "80 channels", "f32[1, 128, 300]"});
  expect_error([&] { conv.forward(g.input("flat", {300})); }, {"Conv1d", "[N, C, L] or [C, L]"});
  nn::MultiheadAttention mha(8, 2);
  expect_error([&] { mha.forward(g.input("q", {2, 8})); }, {"MultiheadAttention", "3-D input"});
  Tensor q = g.input("q3", {2, 5, 8});
  expect_error([&] { mha.forward(q, q, q, {}, false, g.input("pad", {2, 4}, DType::i32)); },
               {"MultiheadAttention", "key_padding_mask must be [2, 5]", "i32[2, 4]"});
  // A graph that already holds the name with another type.
  Graph h;
  h.parameter("weight", {3, 3});
  nn::Linear lin(4, 3);
  expect_error([&] { lin.forward(h.input("x", {1, 4})); }, {"'weight'", "f32[3, 3]", "f32[3, 4]"});
}

struct Loaded {
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>();
  Graph g;
  std::unique_ptr<Session> session;
  Loaded() {
    net->push_back(std::make_shared<nn::Conv2d>(1, 2, std::array<int64_t, 2>{3, 3}));
    net->push_back(std::make_shared<nn::BatchNorm2d>(2));
    g.output("y", net->forward(g.input("x", {1, 1, 5, 5})));
    session = build_session(g);
  }
};

TEST(NnModule, StrictLoadingNamesTheKey) {
  Loaded m;
  nn::StateDict sd = nn::state_dict(*m.net, *m.session);
  EXPECT_EQ(sd.size(), 7u);
  EXPECT_EQ(sd.at("1.running_var").data, std::vector<double>({1.0, 1.0}));

  auto missing = sd;
  missing.erase("1.running_mean");
  missing["1.extra"] = Array({2}, DType::f32);
  expect_error([&] { nn::load_state_dict(*m.net, *m.session, missing); },
               {"missing keys '1.running_mean'", "unexpected keys '1.extra'"});
  auto shape = sd;
  shape["0.weight"] = Array({2, 1, 3, 2}, DType::f32);
  expect_error([&] { nn::load_state_dict(*m.net, *m.session, shape); },
               {"'0.weight' has shape [2, 1, 3, 2]", "[2, 1, 3, 3]"});
  auto dtype = sd;
  dtype["0.bias"].dtype = DType::f16;
  expect_error([&] { nn::load_state_dict(*m.net, *m.session, dtype); }, {"'0.bias' is f16", "f32"});

  // Nothing was written by the failed loads; a good one is.
  sd.at("0.bias").data = {0.25, -0.5};
  nn::load_state_dict(*m.net, *m.session, sd);
  EXPECT_EQ(m.session->get("0.bias").data, std::vector<double>({0.25, -0.5}));
}

TEST(NnModule, StrictFileLoadingChecksFileDtypes) {
  Loaded m;
  test::ScratchDir dir("nn-load");
  nn::save_state_dict(*m.net, *m.session, dir / "ok.safetensors");
  const SafetensorsReader ok(dir / "ok.safetensors");
  EXPECT_EQ(ok.entry("1.num_batches_tracked").type, ElemType::i64);
  nn::load_state_dict(*m.net, *m.session, dir / "ok.safetensors");

  auto arrays = load_safetensors(dir / "ok.safetensors");
  arrays["1.num_batches_tracked"].dtype = DType::i32;  // written as I32, PyTorch has I64
  save_safetensors(dir / "i32.safetensors", arrays);
  expect_error([&] { nn::load_state_dict(*m.net, *m.session, dir / "i32.safetensors"); },
               {"i32.safetensors", "'1.num_batches_tracked' is I32", "expects I64"});
  arrays = load_safetensors(dir / "ok.safetensors");
  arrays.erase("0.weight");
  save_safetensors(dir / "missing.safetensors", arrays);
  expect_error([&] { nn::load_state_dict(*m.net, *m.session, dir / "missing.safetensors"); },
               {"missing keys '0.weight'"});
}

TEST(NnModule, ModulesOutsideTheSessionAreNamed) {
  Loaded m;
  nn::Linear unused(3, 3);
  expect_error([&] { nn::state_dict(unused, *m.session); },
               {"'weight'", "not in the session", "forward()"});
}

TEST(NnModule, DropoutTrainsWithAMaskAndEvaluatesAsIdentity) {
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Dropout>(0.25));
  s.push_back(std::make_shared<nn::Dropout>(0.25));
  Graph g;
  Tensor x = g.input("x", {4000});
  g.output("first", s[0]->forward(x));
  g.output("second", s[1]->forward(x));
  s.eval();
  g.output("eval", s.forward(x) + 0.5);
  auto session = build_session(g);
  session->set("x", Array::full({4000}, 1.0));
  session->step();
  const Array first = session->get("first"), second = session->get("second");
  int64_t zeros = 0, differ = 0;
  for (size_t i = 0; i < first.data.size(); ++i) {
    EXPECT_TRUE(first.data[i] == 0.0 || std::abs(first.data[i] - 4.0 / 3.0) < 1e-6);
    zeros += first.data[i] == 0.0;
    differ += first.data[i] != second.data[i];
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 4000.0, 0.25, 0.03);
  EXPECT_GT(differ, 500);  // each module draws its own mask
  EXPECT_EQ(session->get("eval").data, std::vector<double>(4000, 1.5));
}

// Every step of a recorded graph draws a new mask (the graph's dropout step counter advances),
// each the reference's for that step; the counter is a graph state, not a state_dict key.
TEST(NnModule, DropoutDrawsANewMaskEveryStep) {
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Dropout>(0.5));
  s.push_back(std::make_shared<nn::Dropout>(0.5));
  Graph g;
  g.output("y", s.forward(g.input("x", {300})));
  EXPECT_TRUE(s.state_entries().empty());
  auto session = build_session(g);
  session->set("x", Array::full({300}, 1.0));
  reference::Feeds persistent;
  std::vector<std::vector<double>> masks;
  for (int step = 0; step < 3; ++step) {
    session->step();
    const auto want = reference::run_step(g, {{"x", Array::full({300}, 1.0)}}, persistent);
    masks.push_back(session->get("y").data);
    EXPECT_EQ(masks.back(), want.at("y").data) << "step " << step;
  }
  EXPECT_NE(masks[0], masks[1]);
  EXPECT_NE(masks[1], masks[2]);
  EXPECT_EQ(session->get("nn/dropout_step").data, std::vector<double>({3.0}));
}

}  // namespace
}  // namespace mn
