// The parts of the Session interface the other tests do not reach: a step started with submit()
// and finished by wait() (or by the next set() or get(), which wait first), the names and types
// a session reports, device selection by option and by MN_DEVICE, MN_NO_OPTIMIZE=1, which
// compiles the graph as written, one kernel per op, with the same results, and what a profile
// says each launch computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "support/scoped_env.h"

namespace mn {
namespace {

// y = relu(x·w + b) and its sum, with w and b parameters.
struct Dense {
  Graph g;
  Dense() {
    Tensor x = g.input("x", {4, 3});
    Tensor w = g.parameter("w", {3, 2}, Init::constant(0.5));
    Tensor b = g.parameter("b", {2}, Init::constant(-1.0));
    Tensor y = relu(matmul(x, w) + b);
    g.output("y", y);
    g.output("total", sum(y));
  }
};

// y for x = v everywhere: relu(1.5·v - 1) in every element.
float expected(float v) { return std::max(1.5f * v - 1.0f, 0.0f); }

TEST(SessionApi, SubmitReturnsAndWaitFinishes) {
  Dense d;
  auto s = build_session(d.g);
  s->set("x", std::vector<float>(12, 2.0f));
  s->submit();
  s->wait();
  for (float v : s->get_f32("y")) EXPECT_EQ(v, expected(2.0f));
  // set() waits for the step in flight before writing: the step computes on the old x.
  s->submit();
  s->set("x", std::vector<float>(12, 4.0f));
  for (float v : s->get_f32("y")) EXPECT_EQ(v, expected(2.0f));
  // get() waits too; a second submit() after an unwaited one runs both.
  s->submit();
  EXPECT_EQ(s->get_f32("total")[0], 8 * expected(4.0f));
  s->set("x", std::vector<float>(12, 1.0f));
  s->submit();
  s->submit();
  s->wait();
  s->wait();  // nothing in flight: returns
  EXPECT_EQ(s->get_f32("y")[0], expected(1.0f));
}

// A training step's session: the optimizer's scalar inputs join the graph's own, its state the
// parameters, and every name has the type it was declared with.
TEST(SessionApi, NamesAndTypes) {
  Graph g;
  Tensor x = g.input("x", {4, 3});
  Tensor y = g.input("y", {4}, DType::i32);
  Tensor w = g.parameter("w", {3, 5}, Init::constant(0.1));
  add_training_step(cross_entropy(matmul(x, w), y), Optimizer::adam());
  auto s = build_session(g);
  using Names = std::vector<std::string>;
  EXPECT_EQ(s->input_names(),
            (Names{"bias_correction1", "bias_correction2", "lr", "step", "x", "y"}));
  EXPECT_EQ(s->parameter_names(), Names{"w"});
  const Names states = s->state_names();
  ASSERT_EQ(states.size(), 2u);
  for (const std::string& st : states) EXPECT_EQ(st.rfind("w/", 0), 0u) << st;
  const Names outputs = s->output_names();
  EXPECT_NE(std::find(outputs.begin(), outputs.end(), "loss"), outputs.end());
  EXPECT_EQ(s->type_of("x"), (TensorType{{4, 3}, DType::f32}));
  EXPECT_EQ(s->type_of("y"), (TensorType{{4}, DType::i32}));
  EXPECT_EQ(s->type_of("w"), (TensorType{{3, 5}, DType::f32}));
  EXPECT_EQ(s->type_of(states[0]), (TensorType{{3, 5}, DType::f32}));
  EXPECT_EQ(s->type_of("loss").numel(), 1);
  EXPECT_EQ(s->type_of("lr").numel(), 1);
  try {
    s->type_of("nope");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("x"), std::string::npos) << e.what();
  }
}

// A device chosen by index or by a name substring; a selector matching nothing is a
// DeviceError naming the devices there are.
TEST(SessionApi, DeviceSelection) {
  Dense d;
  const std::string name = build_session(d.g)->device_name();
  SessionOptions by_index;
  by_index.device = "0";
  EXPECT_FALSE(build_session(d.g, by_index)->device_name().empty());
  SessionOptions by_name;
  by_name.device = name.substr(0, 4);
  EXPECT_EQ(build_session(d.g, by_name)->device_name(), name);
  SessionOptions nowhere;
  nowhere.device = "no-such-device-anywhere";
  try {
    build_session(d.g, nowhere);
    ADD_FAILURE() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-device-anywhere"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  {
    // A selector in the options is used as given; MN_DEVICE (read when a process first opens
    // the default device, tests/vulkan/device_test.cpp) does not override it.
    testing::ScopedEnv env("MN_DEVICE", "no-such-device-anywhere");
    EXPECT_EQ(build_session(d.g, by_name)->device_name(), name);
  }
  SessionOptions past_the_end;
  past_the_end.device = "999";
  EXPECT_THROW(build_session(d.g, past_the_end), DeviceError);
}

// MN_NO_OPTIMIZE=1: no e-graph rewriting and no fusion, so the chain of four pointwise ops after
// the matmul is four kernels more than the fused session runs, and the results are the same.
TEST(SessionApi, NoOptimizeRunsEveryOpAsWritten) {
  Graph g;
  Tensor x = g.input("x", {8, 16});
  Tensor w = g.parameter("w", {16, 8}, Init::uniform(-1, 1, 3));
  g.output("y", tanh(relu(matmul(x, w) * 2.0 + 1.0)));
  std::vector<float> xv(8 * 16);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 7) / 7.0f - 0.4f;
  auto run = [&](const char* no_optimize, size_t& dispatches) {
    testing::ScopedEnv env("MN_NO_OPTIMIZE", no_optimize);
    auto s = build_session(g);
    s->set("x", xv);
    s->step();
    dispatches = s->memory().dispatches;
    return s->get_f32("y");
  };
  size_t optimized = 0, as_written = 0;
  const auto a = run(nullptr, optimized);
  const auto b = run("1", as_written);
  EXPECT_EQ(as_written, optimized + 4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f) << i;
}

// A profile names what each launch computes (KernelTime::operands): two products of one shape
// sum together by name and operands, the third of another shape apart; copies name nothing.
TEST(SessionApi, ProfilesNameWhatEachLaunchComputes) {
  Graph g;
  Tensor x = g.input("x", {8, 16});
  Tensor w1 = g.parameter("w1", {16, 16}, Init::uniform(-1, 1, 4));
  Tensor w2 = g.parameter("w2", {16, 16}, Init::uniform(-1, 1, 5));
  Tensor w3 = g.parameter("w3", {16, 4}, Init::uniform(-1, 1, 6));
  g.output("y", matmul(tanh(matmul(tanh(matmul(x, w1)), w2)), w3));
  SessionOptions so;
  so.profile = true;
  auto s = build_session(g, so);
  s->set("x", std::vector<float>(8 * 16, 0.25f));
  s->step();
  const std::vector<KernelTime> profile = s->profile();
  int named = 0;
  for (const KernelTime& k : profile) {
    if (k.name == "upload" || k.name == "download") {
      EXPECT_EQ(k.operands, "") << k.name;
      continue;
    }
    ++named;
    EXPECT_NE(k.operands.find(") <- f32["), std::string::npos) << k.name << ": " << k.operands;
  }
  EXPECT_GE(named, 3);
  const auto totals = kernel_totals(profile, true);
  auto count_of = [&](const std::string& operands) {
    for (const KernelTotal& t : totals) {
      if (t.operands.find(operands) != std::string::npos) return t.count;
    }
    return 0;
  };
  EXPECT_EQ(count_of("(f32[8, 16]) <- f32[8, 16] f32[16, 16]"), 2) << "x·w1 and tanh(..)·w2";
  EXPECT_EQ(count_of("(f32[8, 4]) <- f32[8, 16] f32[16, 4]"), 1);
  for (const KernelTotal& t : kernel_totals(profile)) EXPECT_EQ(t.operands, "");
}

}  // namespace
}  // namespace mn
