// check_numerics names the first graph node whose kernel wrote a NaN or Inf, in dispatch order,
// although the non-finite values spread to every later node; off, nothing is checked.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <meganeura/session.h>

#include "support/expect_error.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// z = sum(log(x @ w) * 2): a negative product makes log the first node to produce NaN.
struct LogGraph {
  Graph g;
  LogGraph() {
    auto x = g.input("x", {2, 3});
    auto w = g.parameter("w", {3, 2}, Init::constant(1.0));
    g.output("z", sum(log(matmul(x, w)) * 2.0));
  }
};

std::string step_error(Session& s, const std::vector<float>& x) {
  s.set("x", x);
  try {
    s.step();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<float> kNegative = {1, 1, 1, -1, -1, -1};  // row 2 of x @ w is -3

TEST(CheckNumerics, NamesTheFirstNodeProducingNaN) {
  LogGraph m;
  SessionOptions o;
  o.check_numerics = true;
  o.optimize = false;  // one kernel per op
  auto s = build_session(m.g, o);
  EXPECT_EQ(step_error(*s, {1, 2, 3, 4, 5, 6}), "");  // finite: no error
  EXPECT_NEAR(s->get("z").data[0], 4 * (std::log(6.0) + std::log(15.0)), 1e-4);
  const std::string msg = step_error(*s, kNegative);
  EXPECT_NE(msg.find("(op log"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nan"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at element 2"), std::string::npos) << msg;  // row 1, column 0
}

TEST(CheckNumerics, AnInfiniteInputIsCaughtAtItsFirstConsumer) {
  LogGraph m;
  SessionOptions o;
  o.check_numerics = true;
  o.optimize = false;
  auto s = build_session(m.g, o);
  const float inf = std::numeric_limits<float>::infinity();
  const std::string msg = step_error(*s, {inf, 1, 1, 1, 1, 1});
  EXPECT_NE(msg.find("(op matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inf"), std::string::npos) << msg;
}

TEST(CheckNumerics, FusedKernelsNameTheirOutputAndTheOpsTheyCover) {
  LogGraph m;
  SessionOptions o;
  o.check_numerics = true;
  auto s = build_session(m.g, o);
  const std::string msg = step_error(*s, kNegative);
  EXPECT_NE(msg.find("first to hold a non-finite value"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel '"), std::string::npos) << msg;
}

TEST(CheckNumerics, OffByDefaultAndOnThroughTheEnvironment) {
  LogGraph m;
  {
    testing::ScopedEnv env("MN_CHECK_NUMERICS", nullptr);
    auto s = build_session(m.g);
    EXPECT_EQ(step_error(*s, kNegative), "");
    EXPECT_TRUE(std::isnan(s->get("z").data[0]));
  }
  testing::ScopedEnv env("MN_CHECK_NUMERICS", "1");
  SessionOptions o;
  o.optimize = false;
  auto s = build_session(m.g, o);
  EXPECT_NE(step_error(*s, kNegative).find("(op log"), std::string::npos);
  o.check_numerics = false;  // the option wins over the environment
  auto quiet = build_session(m.g, o);
  EXPECT_EQ(step_error(*quiet, kNegative), "");
}

// The session's switches take their documented values only: a mistyped one is an error naming
// it, not the default in its place.
TEST(CheckNumerics, MistypedSwitchesAreErrors) {
  LogGraph m;
  const std::pair<const char*, const char*> bad[] = {
      {"MN_CHECK_NUMERICS", "yes"}, {"MN_CHECK_INDICES", "off"}, {"MN_MAP_ARENA", "no"},
      {"MN_FUSION", "off"},         {"MN_NO_OPTIMIZE", "yes"},   {"MN_COOP_STAGES", "4"}};
  for (const auto& [name, value] : bad) {
    testing::ScopedEnv env(name, value);
    mn::expect_error<Error>([&] { build_session(m.g); }, {name, value});
  }
}

}  // namespace
}  // namespace mn
