// Session::set checks the whole shape, not only the element count, and Session::get refuses
// outputs before any step has written them; the session's environment switches refuse bad values.
#include <gtest/gtest.h>

#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "support/scoped_env.h"

namespace mn {
namespace {

void expect_message(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in " << e.what();
  }
}

TEST(SessionChecks, SetWithTheRightCountButAnotherShapeIsAShapeError) {
  Graph g;
  auto x = g.input("x", {2, 3});
  auto w = g.parameter("w", {3, 2}, Init::zeros());
  g.output("y", matmul(x, w));
  auto s = build_session(g);
  for (const Shape& wrong : {Shape{3, 2}, Shape{6}, Shape{1, 2, 3}}) {
    EXPECT_THROW(s->set("x", Array(wrong, DType::f32, std::vector<double>(6, 1.0))), ShapeError);
    expect_message([&] { s->set("x", Array(wrong, DType::f32, std::vector<double>(6, 1.0))); },
                   {"'x'", "[2, 3]", shape_str(wrong)});
  }
  expect_message(
      [&] {
        s->set("w", Array({2, 3}, DType::f32, std::vector<double>(6, 1.0)));
      },
      {"'w'", "[3, 2]", "[2, 3]"});
  s->set("x", Array({2, 3}, DType::f32, std::vector<double>(6, 1.0)));  // the right shape
  s->set("w", Array({3, 2}, DType::f32, std::vector<double>(6, 0.5)));
  s->step();
  EXPECT_EQ(s->get("y").data, std::vector<double>(4, 1.5));
}

TEST(SessionChecks, GetOfAnOutputBeforeTheFirstStepIsAnError) {
  Graph g;
  auto x = g.input("x", {4});
  auto w = g.parameter("w", {4}, Init::constant(2.0));
  g.output("y", x * w);
  auto s = build_session(g);
  expect_message([&] { s->get("y"); }, {"'y'", "not run a step"});
  EXPECT_EQ(s->get("w").data, std::vector<double>(4, 2.0));  // parameters hold their values
  s->set("x", std::vector<float>{1, 2, 3, 4});
  expect_message([&] { s->get("y"); }, {"not run a step"});
  s->step();
  EXPECT_EQ(s->get("y").data, (std::vector<double>{2, 4, 6, 8}));
}

}  // namespace
}  // namespace mn

namespace mn {
namespace {

// MN_FENCE_SPIN_US: how long the wait for a step polls its fence. A step's result is the same
// whether it blocks at once (0) or polls; anything but a whole number of microseconds up to a
// second is refused by name.
TEST(SessionChecks, FenceSpinIsAWholeNumberOfMicroseconds) {
  Graph g;
  g.output("y", g.input("x", {4}) * 2.0);
  for (const char* spin : {"0", "50", "1000000"}) {
    testing::ScopedEnv env("MN_FENCE_SPIN_US", spin);
    auto s = build_session(g);
    s->set("x", Array({4}, DType::f32, {1, 2, 3, 4}));
    s->step();
    EXPECT_EQ(s->get("y").data, (std::vector<double>{2, 4, 6, 8})) << spin;
  }
  for (const char* bad : {"", "abc", "-5", "12us", "1000001"}) {
    testing::ScopedEnv env("MN_FENCE_SPIN_US", bad);
    try {
      build_session(g);
      ADD_FAILURE() << "MN_FENCE_SPIN_US='" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MN_FENCE_SPIN_US"), std::string::npos) << e.what();
    }
  }
}

// SessionOptions::memory_budget_bytes: an arena over it is an error naming its parts, before
// anything is allocated; one within it builds; a budget of 0 is refused.
TEST(SessionChecks, AnArenaOverTheMemoryBudgetIsAnErrorSayingWhatFillsIt) {
  Graph g;
  Tensor x = g.input("x", {64, 32});
  Tensor w = g.parameter("w", {32, 16}, Init::normal(0.0, 0.1, 1));
  Tensor loss = mean(relu(matmul(x, w)));
  g.output("loss", loss);
  add_training_step(loss, Optimizer::adam());
  SessionOptions tight;
  tight.memory_budget_bytes = 4096;
  expect_message([&] { build_session(g, tight); },
                 {"arena of", "over its memory budget of 0.0 MiB", "parameters and states",
                  "program 'step'", "activations", "gradients and optimizer temporaries"});
  SessionOptions roomy;
  roomy.memory_budget_bytes = uint64_t{1} << 30;
  auto s = build_session(g, roomy);
  EXPECT_LE(s->memory().arena_bytes, *roomy.memory_budget_bytes);
  SessionOptions zero;
  zero.memory_budget_bytes = 0;
  expect_message([&] { build_session(g, zero); }, {"memory_budget_bytes must be positive"});
}

}  // namespace
}  // namespace mn
