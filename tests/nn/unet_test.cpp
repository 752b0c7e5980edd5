// diffusers' UNet2DModel and its DDPM / DDIM schedulers against the PyTorch re-implementation
// (tests/fixtures/unet/unet_torch.py, fixture make_unet_fixture.py: 2 channels, blocks of 8, 16,
// 24 channels at 8², 4², 2², attention at 4² and in the middle): diffusers' keys load strictly,
// the predicted noise, DDPM's loss and every gradient, and both sampling loops match, and bad
// configurations and inputs say what is wrong.
#include <gtest/gtest.h>

#include <meganeura/data.h>
#include <meganeura/diffusion.h>
#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/nn.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>

#include "support/expect_error.h"
#include "support/module_gradients.h"
#include "support/random_fill.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/unet" / name;
}

diffusion::UNet2DConfig small_config() {
  diffusion::UNet2DConfig c;
  c.in_channels = c.out_channels = 2;
  c.block_out_channels = {8, 16, 24};
  c.down_block_types = {"DownBlock2D", "AttnDownBlock2D", "DownBlock2D"};
  c.up_block_types = {"UpBlock2D", "AttnUpBlock2D", "UpBlock2D"};
  c.layers_per_block = 1;
  c.attention_head_dim = 4;
  c.norm_num_groups = 4;
  return c;
}

const Shape kShape{2, 2, 8, 8};

TEST(UNet, PredictedNoiseMatchesDiffusersLayout) {
  const SafetensorsReader io(fixture("io.safetensors"));
  diffusion::UNet2DModel unet(small_config());
  Graph g;
  g.output("eps", unet.forward(g.input("sample", kShape), g.input("timesteps", {2})));
  auto s = build_session(g);
  nn::load_state_dict(unet, *s, fixture("unet.safetensors"));  // strict: every key, no other
  s->set("sample", io.array("sample"));
  s->set("timesteps", io.array("timesteps"));
  s->step();
  EXPECT_LT(testing::scaled_error(s->get("eps"), io.array("eps")), 1e-4);
}

TEST(UNet, DdpmLossAndGradientsMatch) {
  const SafetensorsReader io(fixture("io.safetensors"));
  diffusion::UNet2DModel unet(small_config());
  Graph g;
  Tensor loss = diffusion::ddpm_loss(unet, diffusion::NoiseSchedule::linear(),
                                     g.input("x0", kShape), g.input("noise", kShape),
                                     g.input("t", {2}, DType::i32));
  add_training_step(loss, Optimizer::sgd(), {}, true);
  auto s = build_session(g);
  nn::load_state_dict(unet, *s, fixture("unet.safetensors"));
  for (const char* name : {"x0", "noise", "t"}) s->set(name, io.array(name));
  s->set_scalar(StepInputs::lr, 0.0);
  s->set_scalar(StepInputs::step, 1.0);
  s->step();
  const double want = io.array("loss").data[0];
  EXPECT_NEAR(s->get("loss").data[0], want, 1e-4 * want);
  EXPECT_EQ(testing::expect_gradients_match(*s, unet, io, 2e-3, {"to_k.bias"}),
            static_cast<int>(unet.named_parameters().size()));
}

// One denoising step per submission, the sample kept on the GPU between them.
Array run(diffusion::SamplerKind kind, int64_t steps, const Array& initial,
          const std::vector<Array>& step_noise) {
  diffusion::UNet2DModel unet(small_config());
  Graph g;
  diffusion::add_sampling_step(g, unet, kShape);
  auto s = build_session(g);
  nn::load_state_dict(unet, *s, fixture("unet.safetensors"));
  const auto plan = diffusion::sampler_steps(diffusion::NoiseSchedule::linear(),
                                             {.kind = kind, .steps = steps});
  return diffusion::run_sampler(*s, s->program_names().front(), plan, initial,
                                [&](size_t i) { return step_noise.at(i); });
}

TEST(UNet, DdimSamplingMatchesDiffusers) {
  const SafetensorsReader io(fixture("io.safetensors"));
  const Array got = run(diffusion::SamplerKind::ddim, 4, io.array("ddim_noise"), {});
  EXPECT_LT(testing::scaled_error(got, io.array("ddim")), 1e-4);
  EXPECT_GT(testing::scaled_error(io.array("ddim_noise"), io.array("ddim")), 0.1);
}

TEST(UNet, DdpmSamplingMatchesDiffusers) {
  const SafetensorsReader io(fixture("io.safetensors"));
  const Array all = io.array("ddpm_step_noise");
  std::vector<Array> noise;
  const int64_t n = numel(kShape);
  for (int64_t i = 0; i < 5; ++i) {
    noise.emplace_back(kShape, DType::f32,
                       std::vector<double>(all.data.begin() + i * n, all.data.begin() + (i + 1) * n));
  }
  const Array got = run(diffusion::SamplerKind::ddpm, 5, io.array("ddpm_noise"), noise);
  EXPECT_LT(testing::scaled_error(got, io.array("ddpm")), 1e-4);
}

TEST(UNet, SchedulesAreDiffusers) {
  const auto linear = diffusion::NoiseSchedule::linear();
  ASSERT_EQ(linear.steps(), 1000);
  EXPECT_DOUBLE_EQ(linear.betas.front(), 1e-4);
  EXPECT_DOUBLE_EQ(linear.betas.back(), 0.02);
  EXPECT_NEAR(linear.alphas_cumprod.back(), 4.0358e-5, 1e-8);
  const auto scaled = diffusion::NoiseSchedule::scaled_linear();
  EXPECT_NEAR(scaled.betas.back(), 0.012, 1e-15);
  // DDIM's last step goes to ᾱ = 1: the clean estimate, no noise direction.
  const auto ddim = diffusion::sampler_steps(linear, {.steps = 10});
  ASSERT_EQ(ddim.size(), 10u);
  EXPECT_EQ(ddim.front().timestep, 900);
  EXPECT_EQ(ddim.back().timestep, 0);
  EXPECT_DOUBLE_EQ(ddim.back().c0, 1.0);
  EXPECT_DOUBLE_EQ(ddim.back().c2, 0.0);
  const auto ddpm =
      diffusion::sampler_steps(linear, {.kind = diffusion::SamplerKind::ddpm, .steps = 1000});
  EXPECT_EQ(ddpm.back().sigma, 0.0);
  EXPECT_GT(ddpm.front().sigma, 0.1);
}

TEST(UNet, KeysAreDiffusers) {
  diffusion::UNet2DModel unet(small_config());
  std::vector<std::string> keys;
  for (const nn::StateEntry& e : unet.named_parameters()) keys.push_back(e.key);
  const SafetensorsReader w(fixture("unet.safetensors"));
  EXPECT_EQ(keys.size(), w.entries().size());
  for (const char* key : {"conv_in.weight", "time_embedding.linear_2.bias",
                          "down_blocks.0.downsamplers.0.conv.weight",
                          "down_blocks.1.attentions.0.to_out.0.weight",
                          "mid_block.attentions.0.group_norm.bias",
                          "up_blocks.1.resnets.1.conv_shortcut.weight",
                          "up_blocks.0.upsamplers.0.conv.bias", "conv_norm_out.weight"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
  // The small Fashion-MNIST configuration builds and halves 28² twice.
  diffusion::UNet2DModel fashion(diffusion::unet_small_config());
  EXPECT_EQ(fashion.downsamples(), 2);
}

TEST(UNet, BadConfigurationsAndInputsSayWhat) {
  auto c = small_config();
  c.block_out_channels = {8, 18, 24};
  expect_error<Error>([&] { diffusion::UNet2DModel u(c); },
                      {"block_out_channels[1] = 18", "multiple of norm_num_groups 4"});
  c = small_config();
  c.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"};
  expect_error<Error>([&] { diffusion::UNet2DModel u(c); }, {"up_block_types[1]", "CrossAttn"});
  c = small_config();
  c.down_block_types.pop_back();
  expect_error<Error>([&] { diffusion::UNet2DModel u(c); }, {"down_block_types 2"});
  c = small_config();
  c.attention_head_dim = 5;
  expect_error<Error>([&] { diffusion::UNet2DModel u(c); }, {"attention_head_dim 5"});

  diffusion::UNet2DModel unet(small_config());
  Graph g;
  Tensor t = g.input("t", {2});
  expect_error<ShapeError>([&] { unet.forward(g.input("odd", {2, 2, 6, 8}), t); },
                           {"multiples of 4", "f32[2, 2, 6, 8]"});
  expect_error<ShapeError>([&] { unet.forward(g.input("x", kShape), g.input("t3", {3})); },
                           {"timesteps must be f32 [2]"});
  expect_error<Error>([&] { unet.forward(g.input("y", kShape)); }, {"forward(sample, timesteps)"});
  expect_error<ShapeError>(
      [&] {
        diffusion::ddpm_loss(unet, diffusion::NoiseSchedule::linear(), g.input("a", kShape),
                             g.input("b", kShape), g.input("tf", {2}));
      },
      {"i32 timesteps [B]"});
  expect_error<Error>([&] { diffusion::NoiseSchedule::linear(1); }, {"1 steps"});
  expect_error<Error>([&] { diffusion::NoiseSchedule::linear(10, 0.5, 1.5); }, {"outside (0, 1)"});
  expect_error<Error>(
      [&] { diffusion::sampler_steps(diffusion::NoiseSchedule::linear(), {.steps = 1001}); },
      {"1001 inference steps", "1 to 1000"});
}

}  // namespace
}  // namespace mn
