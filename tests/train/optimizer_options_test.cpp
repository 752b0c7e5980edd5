// Optimizers with named hyperparameters, their checks, and OptimizerStepper: the step counter,
// the learning rate from the optimizer's schedule and the bias corrections set for every step,
// equal to driving the step inputs by hand, and resumable with seek().
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <meganeura/optimizer.h>
#include <meganeura/session.h>

namespace mn {
namespace {

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

TEST(OptimizerOptions, NamedHyperparametersSetTheirFields) {
  const Optimizer a = Optimizer::adamw({.lr = 3e-4, .weight_decay = 0.1});
  EXPECT_EQ(a.kind, Optimizer::Kind::adamw);
  EXPECT_EQ(a.lr, 3e-4);
  EXPECT_EQ(a.weight_decay, 0.1);
  EXPECT_EQ(a.beta2, 0.999);
  EXPECT_EQ(Optimizer::adamw().weight_decay, 0.01);  // PyTorch's AdamW default
  EXPECT_EQ(Optimizer::adam().weight_decay, 0.0);
  const Optimizer s =
      Optimizer::sgd({.lr = 0.1,
                      .momentum = 0.9,
                      .nesterov = true,
                      .schedule = {.kind = LrSchedule::Kind::step, .step_size = 2}});
  EXPECT_EQ(s.kind, Optimizer::Kind::sgd);
  EXPECT_EQ(s.momentum, 0.9);
  EXPECT_TRUE(s.nesterov);
  EXPECT_EQ(s.lr_at(0, 10), 0.1);
  EXPECT_NEAR(s.lr_at(2, 10), 0.01, 1e-15);
}

TEST(OptimizerOptions, BadHyperparametersNameTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error([] { Optimizer::sgd({.lr = -1}); }, {"Optimizer::sgd", "Optimizer::lr is -1"});
  expect_error([=] { Optimizer::sgd({.lr = nan}); }, {"Optimizer::lr is nan"});
  expect_error([] { Optimizer::adam({.beta1 = 1.0}); }, {"Optimizer::beta1 is 1", "[0, 1)"});
  expect_error([] { Optimizer::adamw({.beta2 = -0.5}); }, {"Optimizer::beta2 is -0.5"});
  expect_error([=] { Optimizer::adamw({.eps = nan}); }, {"Optimizer::eps is nan"});
  expect_error([] { Optimizer::sgd({.momentum = 1.5}); }, {"Optimizer::momentum is 1.5"});
  expect_error([] { Optimizer::adam({.weight_decay = -0.1}); }, {"Optimizer::weight_decay"});
  expect_error([] { Optimizer::adam({.accumulate = 0}); }, {"Optimizer::accumulate is 0"});
  expect_error([] { Optimizer::adam({.schedule = {.warmup = -3}}); },
               {"Optimizer::schedule.warmup is -3"});
  // Fields set directly are checked where they are used.
  Optimizer o = Optimizer::adam();
  o.beta1 = nan;
  Graph g;
  Tensor w = g.parameter("w", {2});
  expect_error([&] { add_training_step(sum(w * w), o); }, {"add_training_step", "beta1 is nan"});
  expect_error([&] { OptimizerStepper stepper(o); }, {"OptimizerStepper", "beta1"});
  expect_error(
      [] { OptimizerStepper(Optimizer::adam({.schedule = {.kind = LrSchedule::Kind::cosine}})); },
      {"cosine", "total_updates"});
}

// A small regression trained with Adam, accumulation 2 and a warm-up + cosine schedule.
struct Regression {
  Graph g;
  std::unique_ptr<Session> s;
  explicit Regression(const Optimizer& opt) {
    Tensor x = g.input("x", {4, 3});
    Tensor y = g.input("y", {4, 2});
    Tensor w = g.parameter("w", {3, 2}, Init::uniform(-1, 1, 5));
    add_training_step(mse_loss(matmul(x, w), y), opt);
    s = build_session(g);
  }
  void feed(int64_t i) {
    std::vector<float> x(12), y(8);
    for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.7 * k + i);
    for (size_t k = 0; k < y.size(); ++k) y[k] = std::cos(0.3 * k - i);
    s->set("x", x);
    s->set("y", y);
  }
};

Optimizer scheduled() {
  return Optimizer::adam(
      {.lr = 0.05, .accumulate = 2, .schedule = {.kind = LrSchedule::Kind::cosine, .warmup = 1}});
}

TEST(OptimizerStepper, EqualsDrivingTheStepInputsByHand) {
  const Optimizer opt = scheduled();
  const int64_t micro = 8, updates = micro / 2;
  Regression by_hand(opt), stepped(opt);
  OptimizerStepper steps(opt, updates);
  for (int64_t i = 0; i < micro; ++i) {
    by_hand.feed(i);
    const int64_t update = i / 2;
    for (const auto& [n, v] : step_scalars(opt, opt.lr_at(update, updates), update + 1))
      by_hand.s->set_scalar(n, v);
    by_hand.s->set_scalar(StepInputs::apply, (i + 1) % 2 == 0 ? 1.0 : 0.0);
    by_hand.s->step();
    EXPECT_EQ(steps.updates(), update);
    EXPECT_EQ(steps.lr(), opt.lr_at(update, updates));
    stepped.feed(i);
    steps.step(*stepped.s);
  }
  EXPECT_EQ(steps.micro_batches(), micro);
  EXPECT_EQ(steps.updates(), updates);
  EXPECT_EQ(stepped.s->get("w").data, by_hand.s->get("w").data);
  // The schedule moved the rate: warm-up, then cosine down to 0 at the end.
  EXPECT_NE(opt.lr_at(1, updates), opt.lr_at(2, updates));
}

TEST(OptimizerStepper, SeekResumesTheCounter) {
  const Optimizer opt = scheduled();
  Regression whole(opt), first(opt), second(opt);
  OptimizerStepper a(opt, 4), b(opt, 4), c(opt, 4);
  for (int64_t i = 0; i < 8; ++i) {
    whole.feed(i);
    a.step(*whole.s);
  }
  for (int64_t i = 0; i < 5; ++i) {  // stops in the middle of an accumulation
    first.feed(i);
    b.step(*first.s);
  }
  for (const std::string& n : first.s->parameter_names()) second.s->set(n, first.s->get(n));
  for (const std::string& n : first.s->state_names()) second.s->set(n, first.s->get(n));
  c.seek(b.micro_batches());
  for (int64_t i = 5; i < 8; ++i) {
    second.feed(i);
    c.step(*second.s);
  }
  EXPECT_EQ(second.s->get("w").data, whole.s->get("w").data);
  expect_error([&] { c.seek(-1); }, {"seek", "-1"});
}

}  // namespace
}  // namespace mn
