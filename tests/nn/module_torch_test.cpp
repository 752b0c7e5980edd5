// nn modules against PyTorch (fixtures made by tests/fixtures/nn/make_nn_fixtures.py): a module
// loaded from PyTorch's state_dict computes PyTorch's outputs in evaluation and training mode,
// its gradients and its buffers after a training step, and its state_dict written back is
// PyTorch's file tensor for tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include <meganeura/nn.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "support/random_fill.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/nn" / name;
}

// The small CNN of the fixture script: conv -> bn -> relu -> max_pool -> flatten -> fc.
struct SmallCnn : nn::Module {
  SmallCnn() : Module("SmallCnn") {
    conv =
        register_module("conv", std::make_shared<nn::Conv2d>(2, 4, std::array<int64_t, 2>{3, 3},
                                                             nn::Conv2dConfig{.padding = {1, 1}}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Linear>(4 * 4 * 4, 5));
  }
  Tensor forward(Tensor x) override {
    Tensor h = max_pool2d(relu(bn->forward(conv->forward(x))), Pool2dOptions{});
    return fc->forward(nn::Flatten(1).forward(h));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> fc;
};

// A fixture case: the module and how its outputs are built from the fixture's inputs.
struct Case {
  std::string name;
  std::shared_ptr<nn::Module> module;
  std::function<std::vector<Tensor>(nn::Module&, const std::map<std::string, Tensor>&)> outputs;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto single = [](nn::Module& m, const std::map<std::string, Tensor>& in) {
    return std::vector<Tensor>{m.forward(in.at("x"))};
  };
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->push_back(std::make_shared<nn::Linear>(6, 8));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(8, 3, false));
  out.push_back({"mlp", mlp, single});
  out.push_back({"cnn", std::make_shared<SmallCnn>(), single});
  auto norms = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Embedding>(10, 6), std::make_shared<nn::LayerNorm>(Shape{6}),
      std::make_shared<nn::RMSNorm>(Shape{6})});
  out.push_back({"norms", norms, single});
  out.push_back({"attention", std::make_shared<nn::MultiheadAttention>(8, 2),
                 [](nn::Module& m, const std::map<std::string, Tensor>& in) {
                   auto& mha = dynamic_cast<nn::MultiheadAttention&>(m);
                   Tensor x = in.at("x"), y = in.at("y");
                   return std::vector<Tensor>{mha.forward(x, y, y), mha.forward(x, x, x, {}, true)};
                 }});
  out.push_back(
      {"block",
       std::make_shared<nn::TransformerBlock>(
           8, 2, nn::TransformerBlockConfig{.dim_feedforward = 16, .dropout = 0.0, .gelu = true}),
       single});
  out.push_back({"padded_embedding", std::make_shared<nn::Embedding>(10, 6, -7), single});
  out.push_back({"attention_padding", std::make_shared<nn::MultiheadAttention>(8, 2),
                 [](nn::Module& m, const std::map<std::string, Tensor>& in) {
                   auto& mha = dynamic_cast<nn::MultiheadAttention&>(m);
                   Tensor x = in.at("x"), y = in.at("y");
                   return std::vector<Tensor>{mha.forward(x, y, y, {}, false, in.at("mask"))};
                 }});
  auto stem = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv1d>(4, 6, 3, nn::Conv1dConfig{.padding = 1}),
      std::make_shared<nn::GELU>(),
      std::make_shared<nn::Conv1d>(6, 6, 3, nn::Conv1dConfig{.stride = 2, .padding = 1}),
      std::make_shared<nn::GELU>()});
  out.push_back({"conv1d", stem, single});
  return out;
}

// Builds the case's graph in the module's current mode; in training, a loss sum(y_i · w_i) with
// the fixture's weights and its gradients as outputs "grad/<name>" (SGD at lr 0: no update).
struct Built {
  Graph graph;
  std::unique_ptr<Session> session;
  size_t outputs = 0;
};

std::unique_ptr<Built> build(const Case& c, const SafetensorsReader& io, bool training) {
  auto b = std::make_unique<Built>();
  Graph& g = b->graph;
  c.module->train(training);
  std::map<std::string, Tensor> inputs;
  for (const char* name : {"x", "y", "mask"}) {
    if (!io.contains(name)) continue;
    const Array a = io.array(name);
    inputs[name] = g.input(name, a.shape, a.dtype);
  }
  std::vector<Tensor> ys = c.outputs(*c.module, inputs);
  b->outputs = ys.size();
  Tensor loss;
  for (size_t i = 0; i < ys.size(); ++i) {
    g.output("out" + std::to_string(i), ys[i]);
    Tensor term = sum(ys[i] * g.constant(io.array("loss_weight" + std::to_string(i))));
    loss = loss.valid() ? loss + term : term;
  }
  if (training) add_training_step(loss, Optimizer::sgd(), {}, true);
  b->session = build_session(g);
  nn::load_state_dict(*c.module, *b->session, fixture(c.name + ".safetensors"));
  for (const auto& [name, t] : inputs) b->session->set(name, io.array(name));
  if (training) {
    b->session->set_scalar(StepInputs::lr, 0.0);
    b->session->set_scalar(StepInputs::step, 1.0);
  }
  b->session->step();
  return b;
}

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  EXPECT_LT(testing::scaled_error(got, want), tol) << what;
}

TEST(NnTorch, EvalOutputsMatchPyTorch) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const SafetensorsReader io(fixture(c.name + "_io.safetensors"));
    auto b = build(c, io, false);
    for (size_t i = 0; i < b->outputs; ++i) {
      const std::string n = std::to_string(i);
      expect_close(b->session->get("out" + n), io.array("eval" + n), 2e-5, "eval output " + n);
    }
    // Evaluation leaves the buffers alone.
    for (const nn::StateEntry& e : c.module->named_buffers()) {
      const Array before = SafetensorsReader(fixture(c.name + ".safetensors")).array(e.key);
      EXPECT_EQ(b->session->get(e.graph_name).data, before.data) << e.key;
    }
  }
}

TEST(NnTorch, TrainOutputsGradientsAndBuffersMatchPyTorch) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const SafetensorsReader io(fixture(c.name + "_io.safetensors"));
    auto b = build(c, io, true);
    for (size_t i = 0; i < b->outputs; ++i) {
      const std::string n = std::to_string(i);
      expect_close(b->session->get("out" + n), io.array("train" + n), 2e-5, "train output " + n);
    }
    // A gradient that is zero in exact arithmetic (a conv bias before BatchNorm in training) is
    // rounding noise in both: each is measured against the module's largest gradient too.
    double largest = 0;
    for (const nn::StateEntry& e : c.module->named_parameters()) {
      for (double v : io.array("grad." + e.key).data) largest = std::max(largest, std::abs(v));
    }
    for (const nn::StateEntry& e : c.module->named_parameters()) {
      const Array got = b->session->get("grad/" + e.graph_name), want = io.array("grad." + e.key);
      ASSERT_EQ(got.shape, want.shape) << e.key;
      double diff = 0, scale = 1e-2 * largest;
      for (size_t i = 0; i < want.data.size(); ++i) {
        diff = std::max(diff, std::abs(got.data[i] - want.data[i]));
        scale = std::max(scale, std::abs(want.data[i]));
      }
      EXPECT_LT(diff / scale, 1e-4) << "gradient of " << e.key;
    }
    // Running statistics and the batch count moved as PyTorch's did.
    for (const nn::StateEntry& e : c.module->named_buffers()) {
      expect_close(b->session->get(e.graph_name), io.array("after." + e.key), 1e-5,
                   "buffer " + e.key + " after the step");
    }
  }
}

// Our state_dict file of a module loaded from PyTorch's is PyTorch's: the same keys, dtypes,
// shapes and bytes, so torch's strict load_state_dict reads it into the same module. With
// MN_NN_STATE_DIR set, the files are also written there for `make_nn_fixtures.py --check`.
TEST(NnTorch, StateDictRoundTripsThroughPyTorchFiles) {
  test::ScratchDir dir("nn-state");
  const char* keep = std::getenv("MN_NN_STATE_DIR");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const SafetensorsReader io(fixture(c.name + "_io.safetensors"));
    auto b = build(c, io, false);
    const auto ours_path = dir / (c.name + ".safetensors");
    nn::save_state_dict(*c.module, *b->session, ours_path);
    if (keep)
      nn::save_state_dict(*c.module, *b->session,
                          std::filesystem::path(keep) / (c.name + ".safetensors"));
    const SafetensorsReader ours(ours_path), theirs(fixture(c.name + ".safetensors"));
    ASSERT_EQ(ours.entries().size(), theirs.entries().size());
    for (const SafetensorsEntry& e : theirs.entries()) {
      ASSERT_TRUE(ours.contains(e.name)) << e.name;
      const RawTensor a = ours.raw(e.name), t = theirs.raw(e.name);
      EXPECT_EQ(a.type, t.type) << e.name;
      EXPECT_EQ(a.shape, t.shape) << e.name;
      EXPECT_EQ(a.bytes, t.bytes) << e.name;
    }
    EXPECT_EQ(ours.metadata().at("format"), "pt");
  }
}

}  // namespace
}  // namespace mn
