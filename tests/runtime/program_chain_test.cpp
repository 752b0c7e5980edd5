// Chains (SessionProgram::chain): several runs of a program in one submission give what as many
// steps give, run by run, with outputs fed to the next run's inputs, per-run values and
// collected outputs; a state carries from run to run; bad chains and calls are clear errors.
#include <gtest/gtest.h>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/session.h>

#include "support/scoped_env.h"

namespace mn {
namespace {

constexpr int64_t kT = 10, kD = 4, kRuns = 4;

// A decoding step in miniature: x is written into the cache at `pos`, the next x reads the whole
// cache and a per-step offset `t`, and `token` is the argmax of the next x.
struct Decoder {
  Graph g;
  Decoder() {
    Tensor w = g.parameter("w", {kD, kD}, Init::normal(0, 1, 7));
    Tensor cache = g.state("cache", {kT, kD});
    Tensor x = g.input("x", {1, kD});
    Tensor next = cache_write(cache, x, g.input("pos", {1}, DType::i32));
    g.assign(cache, next);
    Tensor y = tanh(matmul(x, w) + sum(next, {0}) * 0.25 + g.input("t", {}));
    g.output("y", y);
    g.output("token", argmax(y, 1));
  }
};

ProgramChain decoder_chain(int64_t runs) {
  ProgramChain c;
  c.runs = runs;
  c.per_run = {"pos", "t"};
  c.feed = {{"y", "x"}};
  c.collect = {"y", "token"};
  return c;
}

const Array kX0({1, kD}, DType::f32, {0.5, -0.25, 1.0, 0.125});

double offset(int64_t r) { return 0.1 * static_cast<double>(r) - 0.2; }

// The runs one step at a time: every y and token, and the cache after the last.
struct Steps {
  std::vector<double> y, token, cache;
};
Steps one_at_a_time(const Decoder& d, int64_t runs) {
  auto s = build_session(d.g);
  Steps out;
  Array x = kX0;
  for (int64_t r = 0; r < runs; ++r) {
    s->set("x", x);
    s->set("pos", Array({1}, DType::i32, {static_cast<double>(r + 1)}));
    s->set("t", Array::scalar(offset(r)));
    s->step();
    x = s->get("y");
    out.y.insert(out.y.end(), x.data.begin(), x.data.end());
    out.token.push_back(s->get("token").data[0]);
  }
  out.cache = s->get("cache").data;
  return out;
}

std::unique_ptr<Session> chained(const Decoder& d, int64_t runs) {
  return build_session({{"decode", &d.g, std::nullopt, decoder_chain(runs)}});
}

void set_runs(Session& s, int64_t runs) {
  std::vector<double> pos, t;
  for (int64_t r = 0; r < runs; ++r) {
    pos.push_back(static_cast<double>(r + 1));
    t.push_back(offset(r));
  }
  s.set_runs("decode", "pos", Array({runs, 1}, DType::i32, pos));
  s.set_runs("decode", "t", Array({runs}, DType::f32, t));
}

// Host-mapped arena (lavapipe, resizable BAR) and staging copies (a discrete GPU without it).
TEST(ProgramChain, RunsAsStepsOneAtATime) {
  Decoder d;
  const Steps want = one_at_a_time(d, kRuns);
  for (const char* map : {"1", "0"}) {
    SCOPED_TRACE(std::string("MN_MAP_ARENA=") + map);
    testing::ScopedEnv env("MN_MAP_ARENA", map);
    auto s = chained(d, kRuns);
    EXPECT_EQ(s->chain_runs("decode"), kRuns);
    s->set("x", kX0);
    set_runs(*s, kRuns);
    s->step_chain("decode");
    const Array y = s->get_runs("decode", "y");
    EXPECT_EQ(y.shape, (Shape{kRuns, 1, kD}));
    EXPECT_EQ(y.data, want.y);  // the same kernels on the same values
    const Array token = s->get_runs("decode", "token");
    EXPECT_EQ(token.dtype, DType::i32);
    EXPECT_EQ(token.data, want.token);
    EXPECT_EQ(s->get("cache").data, want.cache);
    // get() reads the last run's output.
    EXPECT_EQ(s->get("y").data, std::vector<double>(want.y.end() - kD, want.y.end()));
  }
}

// A profile after a chain holds every run's kernels; after a step, the step's.
TEST(ProgramChain, ProfilesTheLastSubmission) {
  Decoder d;
  SessionOptions o;
  o.profile = true;
  auto s = build_session({{"decode", &d.g, std::nullopt, decoder_chain(kRuns)}}, o);
  s->set("x", kX0);
  s->set("pos", Array({1}, DType::i32, {1}));
  s->set("t", Array::scalar(0.0));
  s->step("decode");
  const size_t step_ops = s->profile("decode").size();
  ASSERT_GT(step_ops, 0u);
  s->set("x", kX0);
  set_runs(*s, kRuns);
  s->step_chain("decode");
  EXPECT_GT(s->profile("decode").size(), kRuns * step_ops - kRuns);  // the copies between runs
  EXPECT_GT(s->chain_gpu_ms("decode"), 0.0);
  s->set("x", kX0);
  s->set("pos", Array({1}, DType::i32, {2}));
  s->set("t", Array::scalar(0.0));
  s->step("decode");
  EXPECT_EQ(s->profile("decode").size(), step_ops);
}

// A second chain goes on from the state the first left; its first x is the host's again.
TEST(ProgramChain, ChainsFollowEachOtherAndSteps) {
  Decoder d;
  const Steps want = one_at_a_time(d, 2 * kRuns);
  auto s = chained(d, kRuns);
  s->set("x", kX0);
  set_runs(*s, kRuns);
  s->step_chain("decode");
  // The fed and per-run inputs must be given again, for a step as for a chain.
  EXPECT_THROW(s->step("decode"), Error);
  EXPECT_THROW(s->step_chain("decode"), Error);
  s->set("x", s->get("y"));
  std::vector<double> pos, t;
  for (int64_t r = kRuns; r < 2 * kRuns; ++r) {
    pos.push_back(static_cast<double>(r + 1));
    t.push_back(offset(r));
  }
  s->set_runs("decode", "pos", Array({kRuns, 1}, DType::i32, pos));
  s->set_runs("decode", "t", Array({kRuns}, DType::f32, t));
  s->step_chain("decode");
  EXPECT_EQ(s->get_runs("decode", "y").data,
            std::vector<double>(want.y.begin() + kRuns * kD, want.y.end()));
  EXPECT_EQ(s->get("cache").data, want.cache);
  // A plain step after a chain, with its inputs set again.
  s->set("x", kX0);
  s->set("pos", Array({1}, DType::i32, {0}));
  s->set("t", Array::scalar(0.0));
  s->step("decode");
  EXPECT_EQ(s->get("cache").data[0], 0.5);
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(ProgramChain, BadChainsNameWhatIsWrong) {
  Decoder d;
  auto build = [&](ProgramChain c) {
    return [&d, c] { build_session({{"decode", &d.g, std::nullopt, c}}); };
  };
  ProgramChain c = decoder_chain(0);
  expect_error(build(c), {"program 'decode''s chain", "at least 1 run", "got 0"});
  c = decoder_chain(2);
  c.per_run = {"y"};
  expect_error(build(c), {"'y' per run", "not an input"});
  c = decoder_chain(2);
  c.feed = {{"token", "x"}};
  expect_error(build(c), {"feeds output 'token' (i32[1])", "input 'x' (f32[1, 4])",
                          "same dtype and element count"});
  c = decoder_chain(2);
  c.feed = {{"y", "pos"}};
  expect_error(build(c), {"input 'pos'"});
  c = decoder_chain(2);
  c.feed = {{"x", "x"}};
  expect_error(build(c), {"'x' as a feed's source", "not an output"});
  c = decoder_chain(2);
  c.collect = {"cache"};
  expect_error(build(c), {"'cache' as collected", "not an output"});
}

TEST(ProgramChain, BadCallsNameWhatIsWrong) {
  Decoder d;
  auto plain = build_session(d.g);
  expect_error([&] { plain->step_chain("step"); }, {"program 'step' has no chain"});
  auto s = chained(d, kRuns);
  expect_error([&] { s->get_runs("decode", "y"); }, {"has not run yet"});
  expect_error([&] { s->get_runs("decode", "x"); }, {"no collected output named 'x'", "token, y"});
  expect_error(
      [&] {
        s->set_runs("decode", "x", Array({kRuns, 1, kD}, DType::f32));
      },
      {"no per-run input named 'x'", "pos, t"});
  expect_error(
      [&] {
        s->set_runs("decode", "pos", Array({kRuns + 1, 1}, DType::i32));
      },
      {"'pos'", "expected shape [4, 1]", "got [5, 1]"});
  s->set("x", kX0);
  s->set_runs("decode", "pos", Array({kRuns, 1}, DType::i32));
  expect_error([&] { s->step_chain("decode"); }, {"inputs never set: t (per run)"});
  EXPECT_EQ(plain->chain_runs("step"), 0);
}

}  // namespace
}  // namespace mn
