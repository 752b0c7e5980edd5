// SmolVLA's action expert against the PyTorch re-implementation of lerobot's
// (tests/fixtures/smolvla/smolvla_torch.py, fixture make_smolvla_fixture.py: hidden 40, 6 query
// heads over 2 key/value heads, 4 layers alternating self- and cross-attention, a prefix of 7
// with padding in one row): lerobot's keys load strictly, the velocity field, the 10-step
// sampling loop, the flow-matching loss and every parameter's gradient match, and bad sizes say
// what is wrong.
#include <gtest/gtest.h>

#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/nn.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>
#include <meganeura/vla.h>

#include "support/expect_error.h"
#include "support/module_gradients.h"
#include "support/random_fill.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/smolvla" / name;
}

const vla::SmolVlaConfig kSmall{.hidden = 40,
                                .heads = 6,
                                .kv_heads = 2,
                                .head_dim = 8,
                                .intermediate = 64,
                                .layers = 4,
                                .chunk = 5,
                                .max_action_dim = 6,
                                .num_steps = 10};
constexpr int64_t kBatch = 2, kPrefix = 7;

void set_prefix(Session& s, const SafetensorsReader& io) {
  for (int64_t l = 0; l < kSmall.layers; ++l) {
    for (const char* what : {"prefix_keys.", "prefix_values."}) {
      const std::string name = what + std::to_string(l);
      s.set(name, io.array(name));
    }
  }
  s.set("prefix_mask", io.array("prefix_mask"));
}

TEST(SmolVla, VelocityMatchesLerobot) {
  const SafetensorsReader io(fixture("io.safetensors"));
  vla::SmolVlaActionExpert expert(kSmall);
  Graph g;
  const vla::VlmPrefix prefix = expert.prefix_inputs(g, kBatch, kPrefix);
  g.output("v", expert.velocity(prefix, g.input("x_t", {kBatch, 5, 6}), g.input("time", {kBatch})));
  auto s = build_session(g);
  nn::load_state_dict(expert, *s, fixture("expert.safetensors"));
  set_prefix(*s, io);
  s->set("x_t", io.array("x_t"));
  s->set("time", io.array("time"));
  s->step();
  // The time embedding's fastest sinusoid turns 2π/0.004 radians per unit of time: its f32
  // angle is good to ~1e-4 radians.
  EXPECT_LT(testing::scaled_error(s->get("v"), io.array("velocity")), 2e-4);
}

TEST(SmolVla, SamplingLoopMatchesLerobot) {
  const SafetensorsReader io(fixture("io.safetensors"));
  vla::SmolVlaActionExpert expert(kSmall);
  Graph g;
  const vla::VlmPrefix prefix = expert.prefix_inputs(g, kBatch, kPrefix);
  g.output("actions", expert.sample(prefix, g.input("noise", {kBatch, 5, 6})));
  auto s = build_session(g);
  nn::load_state_dict(expert, *s, fixture("expert.safetensors"));
  set_prefix(*s, io);
  s->set("noise", io.array("noise"));
  s->step();
  const Array got = s->get("actions"), want = io.array("sample");
  EXPECT_LT(testing::scaled_error(got, want), 1e-4);
  // The loop moved the noise: a graph that skipped steps would not match.
  EXPECT_GT(testing::scaled_error(io.array("noise"), want), 0.1);
}

TEST(SmolVla, FlowMatchingLossAndGradientsMatchLerobot) {
  const SafetensorsReader io(fixture("io.safetensors"));
  vla::SmolVlaActionExpert expert(kSmall);
  Graph g;
  const vla::VlmPrefix prefix = expert.prefix_inputs(g, kBatch, kPrefix);
  Tensor loss =
      expert.flow_matching_loss(prefix, g.input("actions", {kBatch, 5, 6}),
                                g.input("noise", {kBatch, 5, 6}), g.input("time", {kBatch}));
  add_training_step(loss, Optimizer::sgd(), {}, true);
  auto s = build_session(g);
  nn::load_state_dict(expert, *s, fixture("expert.safetensors"));
  set_prefix(*s, io);
  s->set("actions", io.array("actions"));
  s->set("noise", io.array("train_noise"));
  s->set("time", io.array("train_time"));
  s->set_scalar(StepInputs::lr, 0.0);
  s->set_scalar(StepInputs::step, 1.0);
  s->step();
  EXPECT_NEAR(s->get("loss").data[0], io.array("loss").data[0], 1e-4 * io.array("loss").data[0]);
  EXPECT_EQ(testing::expect_gradients_match(*s, expert, io, 2e-3), 45);
}

TEST(SmolVla, KeysAreLerobots) {
  vla::SmolVlaActionExpert expert(kSmall);
  std::vector<std::string> keys;
  for (const nn::StateEntry& e : expert.named_parameters()) keys.push_back(e.key);
  ASSERT_EQ(keys.size(), 45u);
  EXPECT_EQ(keys.front(), "vlm_with_expert.lm_expert.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(keys.back(), "action_time_mlp_out.bias");
  // Cross-attention layers (odd) project the VLM's keys: kv_heads · head_dim inputs.
  const SafetensorsReader w(fixture("expert.safetensors"));
  EXPECT_EQ(w.array("vlm_with_expert.lm_expert.layers.1.self_attn.k_proj.weight").shape,
            (Shape{16, 16}));
  EXPECT_EQ(w.array("vlm_with_expert.lm_expert.layers.0.self_attn.k_proj.weight").shape,
            (Shape{16, 40}));
  const vla::SmolVlaConfig base = vla::smolvla_base_config();
  EXPECT_EQ(base.hidden, 720);
  EXPECT_EQ(base.intermediate, 2048);
  EXPECT_EQ(base.chunk, 50);
}

TEST(SmolVla, BadSizesAndInputsSayWhat) {
  vla::SmolVlaConfig c = kSmall;
  c.kv_heads = 4;
  expect_error<Error>([&] { vla::SmolVlaActionExpert e(c); }, {"not a multiple of kv_heads 4"});
  c = kSmall;
  c.chunk = 0;
  expect_error<Error>([&] { vla::SmolVlaActionExpert e(c); }, {"chunk is 0"});
  c = kSmall;
  c.head_dim = 7;
  expect_error<Error>([&] { vla::SmolVlaActionExpert e(c); }, {"must be even"});

  vla::SmolVlaActionExpert expert(kSmall);
  Graph g;
  vla::VlmPrefix prefix = expert.prefix_inputs(g, kBatch, kPrefix);
  Tensor time = g.input("time", {kBatch});
  expect_error<ShapeError>(
      [&] {
        expert.velocity(prefix, g.input("x", {kBatch, 4, 6}), time);
      },
      {"x_t must be [B, 5, 6]"});
  Tensor x = g.input("x_t", {kBatch, 5, 6});
  expect_error<ShapeError>([&] { expert.velocity(prefix, x, g.input("t3", {3})); },
                           {"time must be [2]"});
  vla::VlmPrefix short_prefix = prefix;
  short_prefix.keys.pop_back();
  expect_error<ShapeError>([&] { expert.velocity(short_prefix, x, time); }, {"keys and values of 3"});
  vla::VlmPrefix wrong = prefix;
  wrong.values[2] = g.input("v2", {kBatch, kPrefix, 3, 8});
  expect_error<ShapeError>([&] { expert.velocity(wrong, x, time); }, {"prefix values of layer 2"});
  expect_error<Error>([&] { expert.forward(x); }, {"takes a prefix"});
}

}  // namespace
}  // namespace mn
