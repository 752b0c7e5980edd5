// Optimizer updates as graph ops against PyTorch's torch.optim (fixtures made by
// fixtures/make_optimizer_fixtures.py): six steps with a changing learning rate.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include <meganeura/optimizer.h>
#include <meganeura/reference.h>

namespace mn {
namespace {

nlohmann::json load_fixtures() {
  std::ifstream f(std::string(MN_SOURCE_DIR) + "/tests/train/fixtures/optimizer_fixtures.json");
  EXPECT_TRUE(f.good());
  return nlohmann::json::parse(f);
}

Optimizer optimizer_for(const nlohmann::json& c) {
  Optimizer o;
  o.kind = optimizer_from_name(c["kind"]);
  o.momentum = c.value("momentum", 0.0);
  o.dampening = c.value("dampening", 0.0);
  o.nesterov = c.value("nesterov", false);
  o.weight_decay = c.value("weight_decay", 0.0);
  o.clip_grad_norm = c.value("clip", 0.0);
  return o;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i)
    err = std::max(err, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
  return err;
}

TEST(Optimizer, MatchesTorchOptim) {
  auto fx = load_fixtures();
  for (const auto& c : fx["cases"]) {
    SCOPED_TRACE(c["config"]["name"].get<std::string>());
    Graph g;
    auto x = g.input("x", {8, 4});
    auto y = g.input("y", {8, 3});
    auto w = g.parameter("w", {4, 3});
    auto b = g.parameter("b", {3});
    auto loss = mse_loss(matmul(x, w) + b, y);
    add_training_step(loss, optimizer_for(c["config"]));

    reference::Feeds persistent;
    persistent["w"] = Array({4, 3}, DType::f32, fx["w0"].get<std::vector<double>>());
    persistent["b"] = Array({3}, DType::f32, fx["b0"].get<std::vector<double>>());
    reference::Feeds inputs;
    inputs["x"] = Array({8, 4}, DType::f32, fx["x"].get<std::vector<double>>());
    inputs["y"] = Array({8, 3}, DType::f32, fx["y"].get<std::vector<double>>());
    auto lrs = fx["lrs"].get<std::vector<double>>();
    for (size_t s = 0; s < lrs.size(); ++s) {
      for (const auto& [n, v] : step_scalars(optimizer_for(c["config"]), lrs[s], int64_t(s + 1)))
        inputs[n] = Array::scalar(v);
      auto out = reference::run_step(g, inputs, persistent);
      const auto& want = c["steps"][s];
      EXPECT_NEAR(out.at("loss").data[0], want["loss"].get<double>(),
                  1e-5 * (1 + std::abs(want["loss"].get<double>())))
          << "step " << s;
      // Parameters are stored as f32 after each step, PyTorch's in float64: 1e-5 relative.
      EXPECT_LE(max_rel(persistent["w"].data, want["w"].get<std::vector<double>>()), 1e-5)
          << "step " << s;
      EXPECT_LE(max_rel(persistent["b"].data, want["b"].get<std::vector<double>>()), 1e-5)
          << "step " << s;
    }
  }
}

TEST(Optimizer, AccumulationEqualsLargeBatch) {
  // Two micro-batches of 4 with accumulate=2 update like one batch of 8 (mean losses).
  auto make = [](int64_t batch, int accumulate) {
    auto g = std::make_unique<Graph>();
    auto x = g->input("x", {batch, 4});
    auto y = g->input("y", {batch, 3});
    auto w = g->parameter("w", {4, 3}, Init::normal(0, 1, 5));
    Optimizer o = Optimizer::adamw({.weight_decay = 0.1});
    o.accumulate = accumulate;
    add_training_step(mse_loss(matmul(x, w), y), o);
    return g;
  };
  auto big = make(8, 1);
  auto small = make(4, 2);
  std::vector<double> xs(32), ys(24);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(double(i));
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = std::cos(double(i));
  reference::Feeds pb, ps;
  for (int step = 1; step <= 3; ++step) {
    reference::Feeds in{{"x", Array({8, 4}, DType::f32, xs)},
                        {"y", Array({8, 3}, DType::f32, ys)},
                        {"lr", Array::scalar(0.1)}};
    for (const auto& [n, v] : step_scalars(Optimizer::adamw({.weight_decay = 0.1}), 0.1, step))
      in[n] = Array::scalar(v);
    reference::run_step(*big, in, pb);
    for (int half = 0; half < 2; ++half) {
      std::vector<double> hx(xs.begin() + half * 16, xs.begin() + half * 16 + 16);
      std::vector<double> hy(ys.begin() + half * 12, ys.begin() + half * 12 + 12);
      reference::Feeds hin{{"x", Array({4, 4}, DType::f32, hx)},
                           {"y", Array({4, 3}, DType::f32, hy)},
                           {"apply", Array::scalar(half == 1 ? 1.0 : 0.0)}};
      for (const auto& [n, v] : step_scalars(Optimizer::adamw({.weight_decay = 0.1}), 0.1, step))
        hin[n] = Array::scalar(v);
      reference::run_step(*small, hin, ps);
      if (half == 0) {
        // No update before the last micro-batch.
        auto w_before = step == 1 ? initialize(Init::normal(0, 1, 5), {4, 3}).data : pb["w"].data;
        if (step == 1) EXPECT_LE(max_rel(ps["w"].data, w_before), 1e-7);
      }
    }
    EXPECT_LE(max_rel(ps["w"].data, pb["w"].data), 1e-5) << "step " << step;
  }
}

TEST(Optimizer, RejectsBadConfiguration) {
  Graph g;
  auto x = g.input("x", {2});
  EXPECT_THROW(add_training_step(sum(x), Optimizer::sgd()), Error);  // no parameters
  auto w = g.parameter("w", {2});
  EXPECT_THROW(add_training_step(x * w, Optimizer::sgd()), ShapeError);  // non-scalar loss
  EXPECT_THROW(optimizer_from_name("lion"), Error);
}

}  // namespace
}  // namespace mn
