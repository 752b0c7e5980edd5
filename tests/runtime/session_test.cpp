#include <gtest/gtest.h>

#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

TEST(Session, ElementwiseMatmulReduction) {
  Graph g;
  auto x = g.input("x", {5, 7});
  auto w = g.parameter("w", {7, 3}, Init::normal(0, 1, 3));
  auto b = g.parameter("b", {3}, Init::uniform(-1, 1, 4));
  auto h = relu(matmul(x, w) + b);
  g.output("h", h);
  g.output("s", sum(h * h, {1}));
  auto session = build_session(g);
  auto rng = testing::rng_for("session");
  Array xv = testing::random_array(rng, {{5, 7}, DType::f32});
  session->set("x", xv);
  session->step();
  auto want = reference::evaluate(g, {{"x", xv}});
  EXPECT_TRUE(testing::elementwise_near(session->get("h"), want["h"], 1e-5));
  EXPECT_TRUE(testing::elementwise_near(session->get("s"), want["s"], 1e-5));
}

// Outputs large and small, each step's values, and parameters read on demand, whichever way
// the host reaches the arena: mapped (lavapipe, resizable BAR), through staging copies
// (MN_MAP_ARENA=0), or mapped for writing and read through copies, as a discrete GPU's BAR,
// whose uncached reads took ~40 ms for 2.3 MB on the H200 (MN_MAP_ARENA=write).
TEST(Session, ReadsBackEveryWayTheHostReachesTheArena) {
  for (const char* map : {"1", "0", "write"}) {
    SCOPED_TRACE(std::string("MN_MAP_ARENA=") + map);
    testing::ScopedEnv env("MN_MAP_ARENA", map);
    Graph g;
    auto x = g.input("x", {300, 40});
    auto p = g.parameter("p", {40}, Init::uniform(-1, 1, 5));
    g.output("big", x * g.scalar(2.0) + p);  // 48 KB: copied back where reads are uncached
    g.output("small", sum(x, {0}));          // 160 bytes: read where it lies
    auto session = build_session(g);
    auto rng = testing::rng_for("session-readback");
    for (int step = 0; step < 2; ++step) {
      const Array xv = testing::random_array(rng, {{300, 40}, DType::f32});
      session->set("x", xv);
      session->step();
      auto want = reference::evaluate(g, {{"x", xv}});
      EXPECT_TRUE(testing::elementwise_near(session->get("big"), want["big"], 1e-6));
      EXPECT_TRUE(testing::elementwise_near(session->get("small"), want["small"], 1e-5));
      EXPECT_TRUE(testing::elementwise_near(
          session->get("p"), initialize(Init::uniform(-1, 1, 5), {40}), 0.0));
    }
  }
}

TEST(Session, GradientsReadByName) {
  Graph g;
  auto x = g.input("x", {4, 3});
  auto w = g.parameter("w", {3, 2}, Init::normal(0, 1, 9));
  auto loss = mean(matmul(x, w) * matmul(x, w));
  add_training_step(loss, Optimizer::sgd(), {}, /*output_gradients=*/true);
  auto session = build_session(g);
  auto rng = testing::rng_for("grad-by-name");
  reference::Feeds in{{"x", testing::random_array(rng, {{4, 3}, DType::f32})},
                      {"lr", Array::scalar(0.1)},
                      {"step", Array::scalar(1)}};
  for (const auto& [name, value] : in) session->set(name, value);
  session->step();
  auto want = reference::evaluate(g, in);  // parameters at their initial values, as on the GPU
  EXPECT_TRUE(testing::elementwise_near(session->get("grad/w"), want.at("grad/w"), 1e-5));
}

TEST(Session, UnknownNamesAndSizesAreErrors) {
  Graph g;
  auto x = g.input("x", {4});
  g.output("y", x * 2.0);
  auto session = build_session(g);
  EXPECT_THROW(session->set("nope", std::vector<float>{1, 2, 3, 4}), Error);
  EXPECT_THROW(session->set("x", std::vector<float>{1, 2, 3}), ShapeError);
  EXPECT_THROW(session->set("y", std::vector<float>{1, 2, 3, 4}), Error);  // outputs are read only
  EXPECT_THROW(session->step(), Error);                                    // x never set
  session->set("x", std::vector<float>{1, 2, 3, 4});
  session->step();
  EXPECT_EQ(session->get_f32("y"), (std::vector<float>{2, 4, 6, 8}));
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// Preset parameters skip their initializers and take what the caller sets; the others, and
// zero-initialized states (written without evaluating the initializer), keep their values.
TEST(Session, PresetParametersTakeTheCallersValues) {
  Graph g;
  Tensor x = g.input("x", {4});
  Tensor w = g.parameter("w", {4}, Init::constant(2.0));
  Tensor b = g.parameter("b", {4}, Init::constant(5.0));
  Tensor s = g.state("s", {3, 1000}, Init::zeros());
  g.output("y", x * w + b + sum(s));
  SessionOptions o;
  o.preset = {"w"};
  auto session = build_session(g, o);
  EXPECT_EQ(session->get("b").data, std::vector<double>(4, 5.0));
  EXPECT_EQ(session->get("s").data, std::vector<double>(3000, 0.0));
  session->set("w", std::vector<float>{1, 2, 3, 4});
  session->set("x", std::vector<float>{1, 1, 1, 1});
  session->step();
  EXPECT_EQ(session->get("y").data, (std::vector<double>{6, 7, 8, 9}));
}

}  // namespace
}  // namespace mn
