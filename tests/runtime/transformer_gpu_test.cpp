// The transformer (build_transformer: embedding, RMSNorm, rotary attention with grouped
// key/value heads, SwiGLU, tied head, next-token loss) trained on the GPU against the float64
// reference: the logits and loss of every step and the parameters after three SGD-momentum
// steps, whose gradients pass back through every block.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/small_transformer.h"

namespace mn {
namespace {

TEST(TransformerGpu, TrainingStepsMatchTheReference) {
  LanguageModel m = build_transformer(testing::small_transformer(2, 32, 50, 8, 9));
  const Optimizer opt = Optimizer::sgd({.momentum = 0.9});
  add_training_step(m.loss, opt);
  auto session = build_session(*m.graph);
  reference::Feeds persistent = reference::initial_parameters(*m.graph);
  auto rng = testing::rng_for("transformer-gpu");
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    reference::Feeds in;
    in["tokens"] = testing::random_array(rng, m.tokens.type(), 0, 50);
    in["targets"] = testing::random_array(rng, m.targets.type(), 0, 50);
    for (const auto& [n, v] : step_scalars(opt, 0.05, step)) in[n] = Array::scalar(v);
    for (const auto& [name, value] : in) session->set(name, value);
    session->step();
    const auto want = reference::run_step(*m.graph, in, persistent);
    EXPECT_TRUE(testing::elementwise_near(session->get("logits"), want.at("logits"), 2e-5));
    const double loss = want.at("loss").data[0];
    EXPECT_NEAR(session->get("loss").data[0], loss, 1e-5 * loss);
  }
  // SGD's f32 drift, as in training_test.cpp.
  for (const std::string& name : session->parameter_names()) {
    EXPECT_TRUE(testing::elementwise_near(session->get(name), persistent.at(name), 2e-4)) << name;
  }
}

}  // namespace
}  // namespace mn
