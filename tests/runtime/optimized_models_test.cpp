// The built-in models on the GPU with and without optimization (e-graph + fusion): the same
// losses and the same parameters after a few training steps, and far fewer dispatches.
#include <gtest/gtest.h>

#include <cmath>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/small_transformer.h"

namespace mn {
namespace {

struct Built {
  std::unique_ptr<Graph> graph;
  Tensor loss;
  // Inputs of each step, drawn from `rng`.
  std::function<void(Session&, std::mt19937_64&)> feed;
};

Built classifier(ModelKind kind) {
  ClassifierSpec spec;
  spec.kind = kind;
  spec.batch = 8;
  spec.hidden = {16};
  spec.seed = 5;
  Classifier c = build_classifier(spec);
  Built b{std::move(c.graph), c.loss, {}};
  const TensorType x = c.input.type(), y = c.labels.type();
  b.feed = [x, y](Session& s, std::mt19937_64& rng) {
    s.set("x", testing::random_array(rng, x, 0.0, 1.0));
    s.set("y", testing::random_array(rng, y, 0, 10));
  };
  return b;
}

Built transformer() {
  const TransformerSpec spec = testing::small_transformer(2, 32, 50, 8, 9);
  LanguageModel m = build_transformer(spec);
  Built b{std::move(m.graph), m.loss, {}};
  const TensorType t = m.tokens.type();
  b.feed = [t](Session& s, std::mt19937_64& rng) {
    s.set("tokens", testing::random_array(rng, t, 0, 50));
    s.set("targets", testing::random_array(rng, t, 0, 50));
  };
  return b;
}

// Five SGD-momentum steps with optimization off and on, from the same initial parameters and
// inputs. f32 kernels that fuse or reorder work round differently: 1e-4 relative to each
// tensor's largest magnitude, as the GPU-against-reference training tests allow for SGD.
void expect_same_steps(Built (*make)(), const char* label) {
  std::unique_ptr<Session> sessions[2];
  Built models[2] = {make(), make()};
  for (int i = 0; i < 2; ++i) {
    add_training_step(models[i].loss, Optimizer::sgd({.momentum = 0.9}));
    SessionOptions so;
    so.optimize = i == 1;
    sessions[i] = build_session(*models[i].graph, so);
  }
  for (int step = 1; step <= 5; ++step) {
    double loss[2];
    for (int i = 0; i < 2; ++i) {
      auto rng = testing::rng_for(std::string(label) + std::to_string(step));
      models[i].feed(*sessions[i], rng);
      sessions[i]->set_scalar("lr", 0.05);
      sessions[i]->set_scalar("step", step);
      sessions[i]->step();
      loss[i] = sessions[i]->get("loss").data[0];
    }
    EXPECT_NEAR(loss[1], loss[0], 1e-5 * (1 + std::abs(loss[0]))) << label << " step " << step;
  }
  for (const std::string& name : sessions[0]->parameter_names()) {
    EXPECT_TRUE(testing::elementwise_near(sessions[1]->get(name), sessions[0]->get(name), 1e-4))
        << label << " " << name;
  }
  const size_t before = sessions[0]->memory().dispatches, after = sessions[1]->memory().dispatches;
  EXPECT_LT(after, before) << label;
  std::printf("%s: %zu dispatches as written, %zu optimized\n", label, before, after);
}

Built mlp() { return classifier(ModelKind::mlp); }
Built cnn() { return classifier(ModelKind::cnn); }

TEST(OptimizedModels, MlpMatchesUnoptimized) { expect_same_steps(mlp, "mlp"); }
TEST(OptimizedModels, CnnMatchesUnoptimized) { expect_same_steps(cnn, "cnn"); }
TEST(OptimizedModels, TransformerMatchesUnoptimized) {
  expect_same_steps(transformer, "transformer");
}

}  // namespace
}  // namespace mn
