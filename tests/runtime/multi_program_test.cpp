// Sessions running several programs: shared parameters and states are one buffer, each program
// keeps its own inputs and outputs, and outputs left out of the per-step readback are still
// read on demand.
#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

constexpr int64_t kT = 5, kD = 3;

// "prefill" writes rows 0..1 of the cache from x·w, "decode" writes one row at `pos` and reads
// the whole cache through w.
struct TwoPrograms {
  Graph prefill, decode;
  TwoPrograms() {
    {
      Tensor w = prefill.parameter("w", {kD, kD}, Init::normal(0, 1, 3));
      Tensor cache = prefill.state("cache", {kT, kD});
      Tensor x = prefill.input("x", {2, kD});
      Tensor next = cache_write(cache, matmul(x, w), prefill.input("pos", {2}, DType::i32));
      prefill.assign(cache, next);
      prefill.output("first", sum(next, {1}));
    }
    {
      Tensor w = decode.parameter("w", {kD, kD}, Init::normal(0, 1, 3));
      Tensor cache = decode.state("cache", {kT, kD});
      Tensor x = decode.input("x", {1, kD});
      Tensor next = cache_write(cache, x, decode.input("pos", {1}, DType::i32));
      decode.assign(cache, next);
      decode.output("scores", matmul(next, w));
      decode.output("token", argmax(sum(next, {1}), 0));
    }
  }
};

TEST(MultiProgram, SharedStateAndParameter) {
  TwoPrograms t;
  auto session = build_session({{"prefill", &t.prefill, std::nullopt},
                                {"decode", &t.decode, std::vector<std::string>{"token"}}});
  auto rng = testing::rng_for("multi-program");
  reference::Feeds persistent = reference::initial_parameters(t.prefill);
  Array w = testing::random_array(rng, {{kD, kD}, DType::f32});
  session->set("w", w);  // a shared parameter: seen by both programs
  persistent["w"] = w;

  reference::Feeds pre{{"x", testing::random_array(rng, {{2, kD}, DType::f32})},
                       {"pos", Array({2}, DType::i32, {0, 1})}};
  for (const auto& [name, value] : pre) session->set("prefill", name, value);
  session->step("prefill");
  auto want = reference::run_step(t.prefill, pre, persistent);
  EXPECT_TRUE(testing::elementwise_near(session->get("prefill", "first"), want["first"], 1e-5));

  for (int64_t pos = 2; pos < kT; ++pos) {
    reference::Feeds dec{{"x", testing::random_array(rng, {{1, kD}, DType::f32})},
                         {"pos", Array({1}, DType::i32, {static_cast<double>(pos)})}};
    for (const auto& [name, value] : dec) session->set("decode", name, value);
    session->step("decode");
    want = reference::run_step(t.decode, dec, persistent);
    // The cache rows prefill wrote are read by decode through the shared state.
    EXPECT_TRUE(testing::elementwise_near(session->get("scores"), want["scores"], 1e-5)) << pos;
    EXPECT_EQ(session->get("token").data, want["token"].data) << pos;
  }
  EXPECT_TRUE(testing::elementwise_near(session->get("cache"), persistent.at("cache"), 1e-6));
  // The prefill output is kept across decode steps.
  EXPECT_EQ(session->program_names(), (std::vector<std::string>{"prefill", "decode"}));
}

TEST(MultiProgram, MemoryCountsSharedBuffersOnce) {
  TwoPrograms t;
  auto session = build_session({{"prefill", &t.prefill, std::nullopt},
                                {"decode", &t.decode, std::nullopt}});
  const MemorySummary m = session->memory();
  ASSERT_EQ(m.programs.size(), 2u);
  // w (36 bytes) and the cache (60 bytes), each once, at the 256-byte binding alignment at most.
  EXPECT_GE(m.shared_bytes, (kD * kD + kT * kD) * 4u);
  EXPECT_LE(m.shared_bytes, 2u * 256u);
  // By kind, each counted once although both programs bind them.
  EXPECT_EQ(m.parameter_bytes, kD * kD * 4u);
  EXPECT_EQ(m.state_bytes, kT * kD * 4u);
  uint64_t own = 0, transient = 0;
  for (const ProgramMemory& p : m.programs) {
    own += p.own_bytes;
    transient = std::max(transient, p.transient_bytes);
    EXPECT_GT(p.dispatches, 0u) << p.name;
    // Neither program has gradients; what is live at once fits the shared region.
    EXPECT_EQ(p.backward_bytes, 0u) << p.name;
    EXPECT_LE(p.activation_bytes + p.workspace_bytes, p.transient_bytes) << p.name;
  }
  EXPECT_GT(m.programs[0].activation_bytes, 0u);  // prefill's product before the cache write
  EXPECT_EQ(m.persistent_bytes, m.shared_bytes + own);
  // Intermediates of the two programs share one region.
  EXPECT_LE(m.arena_bytes, m.persistent_bytes + transient + 256u);
}

TEST(MultiProgram, Errors) {
  TwoPrograms t;
  Graph other;
  Tensor c = other.state("cache", {kT, kD + 1});
  other.assign(c, c * 2.0);
  try {
    build_session({{"decode", &t.decode, std::nullopt}, {"other", &other, std::nullopt}});
    ADD_FAILURE() << "no error for a state of two types";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'cache'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[5, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[5, 4]"), std::string::npos) << msg;
  }
  EXPECT_THROW(build_session({{"a", &t.decode, std::nullopt}, {"a", &t.prefill, std::nullopt}}),
               Error);
  EXPECT_THROW(build_session({{"a", &t.decode, std::vector<std::string>{"nope"}}}), Error);
  auto session = build_session({{"prefill", &t.prefill, std::nullopt},
                                {"decode", &t.decode, std::nullopt}});
  EXPECT_THROW(session->step(), Error);                 // which program?
  EXPECT_THROW(session->set("x", Array({1, kD}, DType::f32)), Error);  // x of which program?
  EXPECT_THROW(session->step("nope"), Error);
}

}  // namespace
}  // namespace mn
