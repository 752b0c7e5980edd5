// The small DDPM U-Net (diffusion::unet_small_config: 32, 64, 64 channels at 28², 14², 7²) on
// Fashion-MNIST-shaped batches with random weights: a DDPM training step (noise-prediction loss,
// Adam) and DDIM sampling (50 denoising steps, one submission each). One JSON line per (mode,
// batch). PyTorch counterpart: bench/unet.py (the re-implementation of diffusers' UNet2DModel in
// tests/fixtures/unet).
//
// Usage: bench_unet [--batch 4,32] [--steps 20] [--sampling-steps 50] [--modes train,sample]
//                   [--profile] [--device D] [--plan-device default|h200]
// --plan-device plans each step (one sampling step) for that device instead of running it and
// prints its arena and launches by kernel name.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "plan_device.h"
#include "plan_memory.h"

#include <meganeura/diffusion.h>
#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

namespace {

using mn::bench::ms_since;
using mn::bench::random_array;
namespace diffusion = mn::diffusion;

struct Options {
  int steps = 20;
  int64_t sampling_steps = 50;
  bool profile = false;
  std::string device;
  std::optional<mn::plan::PlanOptions> planned;  // --plan-device: plan, do not run
};

mn::Array random_timesteps(int64_t batch) {
  mn::Array t({batch}, mn::DType::i32);
  for (int64_t i = 0; i < batch; ++i) t.data[static_cast<size_t>(i)] = (i * 397 + 11) % 1000;
  return t;
}

std::unique_ptr<mn::Session> build(const mn::Graph& g, const Options& o, double& build_ms) {
  mn::SessionOptions so;
  so.device = o.device;
  so.profile = o.profile;
  const auto t0 = std::chrono::steady_clock::now();
  auto s = mn::build_session(g, so);
  build_ms = ms_since(t0);
  return s;
}

// Adam steps on the loss of random images, noise and timesteps (the step's cost depends on none).
nlohmann::json train(int64_t batch, const Options& o) {
  diffusion::UNet2DModel unet(diffusion::unet_small_config());
  const mn::Shape shape{batch, 1, 28, 28};
  mn::Graph g;
  mn::Tensor loss =
      diffusion::ddpm_loss(unet, diffusion::NoiseSchedule::linear(), g.input("x0", shape),
                           g.input("noise", shape), g.input("t", {batch}, mn::DType::i32));
  const mn::Optimizer adam = mn::Optimizer::adam({.lr = 1e-3});
  mn::add_training_step(loss, adam);
  nlohmann::json j = {{"bench", "unet"},
                      {"framework", "meganeura"},
                      {"mode", "train"},
                      {"batch", batch},
                      {"image", 28}};
  if (o.planned) {
    j.update(mn::bench::plan_summary(g, *o.planned));
    return j;
  }
  double build_ms = 0;
  auto s = build(g, o, build_ms);
  s->set("x0", random_array(shape, 1));
  s->set("noise", random_array(shape, 2, mn::bench::Draw::normal));
  s->set("t", random_timesteps(batch));
  mn::OptimizerStepper stepper(adam);
  std::vector<double> ms;
  for (int i = 0; i < o.steps + 3; ++i) {
    const auto t = std::chrono::steady_clock::now();
    stepper.step(*s);
    (void)s->get("loss");
    if (i >= 3) ms.push_back(ms_since(t));
  }
  j["build_ms"] = build_ms;
  j.update(mn::bench::step_fields(*s, ms, o.profile));
  return j;
}

// Whole DDIM loops from fixed noise; step_ms_* are per loop, sampling_steps submissions each.
nlohmann::json sample(int64_t batch, const Options& o) {
  diffusion::UNet2DModel unet(diffusion::unet_small_config());
  const mn::Shape shape{batch, 1, 28, 28};
  mn::Graph g;
  diffusion::add_sampling_step(g, unet, shape);
  if (o.planned) {
    nlohmann::json j = {{"bench", "unet"},
                        {"framework", "meganeura"},
                        {"mode", "sample"},
                        {"batch", batch},
                        {"image", 28}};
    j.update(mn::bench::plan_summary(g, *o.planned));  // one sampling step
    return j;
  }
  double build_ms = 0;
  auto s = build(g, o, build_ms);
  const std::vector<diffusion::SamplerStep> steps =
      diffusion::sampler_steps(diffusion::NoiseSchedule::linear(),
                               {.kind = diffusion::SamplerKind::ddim, .steps = o.sampling_steps});
  const mn::Array noise = random_array(shape, 3, mn::bench::Draw::normal);
  std::vector<double> ms;
  const int loops = std::max(3, o.steps / 4);
  for (int i = 0; i < loops + 1; ++i) {
    const auto t = std::chrono::steady_clock::now();
    (void)diffusion::run_sampler(*s, "step", steps, noise, [](size_t) { return mn::Array(); });
    if (i >= 1) ms.push_back(ms_since(t));
  }
  nlohmann::json j = {
      {"bench", "unet"}, {"framework", "meganeura"},       {"mode", "sample"},    {"batch", batch},
      {"image", 28},     {"sampling_steps", steps.size()}, {"build_ms", build_ms}};
  j.update(mn::bench::step_fields(*s, ms, o.profile));
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string batches = "4,32", modes = "train,sample";
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--batch"))
      batches = next();
    else if (!std::strcmp(argv[i], "--steps"))
      o.steps = std::atoi(next().c_str());
    else if (!std::strcmp(argv[i], "--sampling-steps"))
      o.sampling_steps = std::atoll(next().c_str());
    else if (!std::strcmp(argv[i], "--modes"))
      modes = next();
    else if (!std::strcmp(argv[i], "--profile"))
      o.profile = true;
    else if (!std::strcmp(argv[i], "--device"))
      o.device = next();
    else if (!std::strcmp(argv[i], "--plan-device")) {
      const std::string name = next();
      if (!(o.planned = mn::bench::plan_device(name)))
        throw mn::Error("--plan-device takes default or h200, got '" + name + "'");
    } else
      throw mn::Error(std::string("bench_unet: unknown option ") + argv[i]);
  }
  for (const std::string& mode : mn::bench::split(modes)) {
    if (mode != "train" && mode != "sample")
      throw mn::Error("bench_unet: unknown mode '" + mode + "' (expected train or sample)");
    for (const std::string& b : mn::bench::split(batches)) {
      const int64_t batch = std::stoll(b);
      std::cout << (mode == "train" ? train(batch, o) : sample(batch, o)).dump() << std::endl;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_unet: %s\n", e.what());
  return 1;
}
