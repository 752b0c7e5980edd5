// Adam's bias corrections 1 - beta^t come from the host in double (as in PyTorch): an Adam
// update on the GPU matches the float64 reference to 1e-6 relative, where f32 pow of the
// corrections on the device is off by ~5e-5 (1 - 0.999 in f32 keeps only 4 digits).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

namespace mn {
namespace {

// One update of zero-initialised weights and state at step t: loss = sum(w * x), so the
// gradient is x and the weights after the step are exactly the update.
void expect_exact_update(const Optimizer& opt, int64_t t) {
  Graph g;
  auto x = g.input("x", {256});
  auto w = g.parameter("w", {256}, Init::zeros());
  add_training_step(sum(w * x), opt);
  auto session = build_session(g);

  std::mt19937 rng(static_cast<unsigned>(t));
  std::uniform_real_distribution<double> mag(0.25, 4.0);
  std::vector<double> xs(256);
  for (double& v : xs) v = (rng() % 2 ? 1 : -1) * mag(rng);
  reference::Feeds in{{"x", Array({256}, DType::f32, xs)}};
  for (const auto& [n, v] : step_scalars(opt, 1e-3, t)) in[n] = Array::scalar(v);
  for (const auto& [n, v] : in) session->set(n, v);
  session->step();
  reference::Feeds persistent = reference::initial_parameters(g);
  reference::run_step(g, in, persistent);

  const Array got = session->get("w"), want = persistent.at("w");
  double worst = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    ASSERT_NE(want.data[i], 0.0);
    worst = std::max(worst, std::abs(got.data[i] - want.data[i]) / std::abs(want.data[i]));
  }
  EXPECT_LE(worst, 1e-6) << optimizer_name(opt.kind) << " step " << t;
}

TEST(AdamBiasCorrection, UpdateMatchesFloat64Reference) {
  for (int64_t t : {1, 2, 10, 1000}) {
    expect_exact_update(Optimizer::adam(), t);
    expect_exact_update(Optimizer::adamw({.weight_decay = 0.01}), t);
  }
}

TEST(AdamBiasCorrection, StepScalarsAreComputedInDouble) {
  const auto s = step_scalars(Optimizer::adam(), 0.5, 1);
  EXPECT_EQ(s.at(StepInputs::lr), 0.5);
  EXPECT_EQ(s.at(StepInputs::step), 1.0);
  EXPECT_EQ(s.at(StepInputs::bias_correction1), 1.0 - 0.9);
  EXPECT_EQ(s.at(StepInputs::bias_correction2), 1.0 - 0.999);
  EXPECT_DOUBLE_EQ(step_scalars(Optimizer::adamw(), 1, 3).at(StepInputs::bias_correction2),
                   1.0 - 0.999 * 0.999 * 0.999);
  EXPECT_FALSE(
      step_scalars(Optimizer::sgd({.momentum = 0.9}), 1, 1).count(StepInputs::bias_correction1));
  EXPECT_THROW(step_scalars(Optimizer::adam(), 1, 0), Error);
}

}  // namespace
}  // namespace mn
