// Training-step time and arena of torchvision's ResNets (vision::resnet, 224² ImageNet stem):
// one step = forward, backward and SGD-momentum update of a batch of random images and labels,
// one submission, the loss read back. Prints one JSON line per depth.
// PyTorch counterpart: bench/resnet_train.py (torchvision's models, eager and torch.compile).
//
// Usage: bench_resnet_train [--depth 18,50] [--batch 32] [--size 224] [--steps N]
//                           [--precision f32|bf16|f16] [--device D] [--profile]
//                           [--plan-memory]   (plan only, no device: what fills the arena)
//                           [--plan-kernels]  (plan only: launches counted by kernel name)
//                           [--plan-live N]   (and the N largest buffers live at its peak)
//                           [--plan-device default|h200]   (the device it plans for)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "plan_device.h"
#include "plan_memory.h"

#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/vision.h>

namespace {

std::vector<int> depths_of(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

const mn::Optimizer kOptimizer = mn::Optimizer::sgd({.lr = 0.01, .momentum = 0.9});

void build_step(mn::Graph& g, int depth, int64_t batch, int64_t size) {
  auto net = mn::vision::resnet({.depth = depth, .num_classes = 1000});
  mn::Tensor logits = net->forward(g.input("x", {batch, 3, size, size}));
  mn::add_training_step(mn::cross_entropy(logits, g.input("y", {batch}, mn::DType::i32)),
                        kOptimizer);
}

// The step planned for `device` (bench/plan_device.h), no device needed.
nlohmann::json plan(int depth, int64_t batch, int64_t size, mn::DType precision,
                    const mn::plan::PlanOptions& device, size_t live, bool kernels) {
  mn::Graph g;
  build_step(g, depth, batch, size);
  mn::plan::PlanOptions po = device;
  po.precision = precision;
  const mn::plan::StepPlan p = mn::plan::make_step_plan(g, po);
  nlohmann::json j{{"bench", "resnet_train"},
                   {"model", "resnet" + std::to_string(depth)},
                   {"batch", batch},
                   {"precision", mn::dtype_name(precision)},
                   {"memory", mn::bench::peak_fields(p)},
                   {"live_at_peak", mn::bench::live_at_peak(p, live)}};
  j.update(mn::bench::plan_summary(p, kernels));
  return j;
}

nlohmann::json run(int depth, int64_t batch, int64_t size, int steps, const mn::SessionOptions& so) {
  mn::Graph g;
  build_step(g, depth, batch, size);
  const mn::Optimizer& opt = kOptimizer;
  const auto t0 = std::chrono::steady_clock::now();
  auto s = mn::build_session(g, so);
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(depth);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> x(static_cast<size_t>(batch * 3 * size * size));
  for (float& v : x) v = n(rng);
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int32_t& v : y) v = static_cast<int32_t>(rng() % 1000);
  s->set("x", x);
  s->set("y", y);
  mn::OptimizerStepper stepper(opt);
  for (int i = 0; i < 3; ++i) stepper.step(*s);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    stepper.step(*s);
    (void)s->get("loss");
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  nlohmann::json j = mn::bench::step_fields(*s, ms, so.profile);
  j["bench"] = "resnet_train";
  j["model"] = "resnet" + std::to_string(depth);
  j["batch"] = batch;
  j["size"] = size;
  j["precision"] = mn::dtype_name(so.precision);
  j["build_s"] = build_s;
  j["loss"] = s->get("loss").data[0];
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string depths = "18,50";
  int64_t batch = 32, size = 224;
  int steps = 20;
  mn::SessionOptions so;
  bool plan_memory = false, plan_kernels = false;
  size_t plan_live = 0;
  std::string plan_device = "default";
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--depth")) depths = next();
    else if (!std::strcmp(argv[i], "--batch")) batch = std::stoll(next());
    else if (!std::strcmp(argv[i], "--size")) size = std::stoll(next());
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoi(next());
    else if (!std::strcmp(argv[i], "--precision")) so.precision = mn::dtype_from_name(next());
    else if (!std::strcmp(argv[i], "--device")) so.device = next();
    else if (!std::strcmp(argv[i], "--profile")) so.profile = true;
    else if (!std::strcmp(argv[i], "--plan-memory")) plan_memory = true;
    else if (!std::strcmp(argv[i], "--plan-kernels"))
      plan_memory = plan_kernels = true;
    else if (!std::strcmp(argv[i], "--plan-device"))
      plan_device = next();
    else if (!std::strcmp(argv[i], "--plan-live")) {
      const std::string text = next();
      const std::optional<size_t> n = mn::bench::live_count(text.c_str());
      if (!n) {
        std::fprintf(stderr, "bench_resnet_train: --plan-live takes a positive count of buffers, got '%s'\n",
                     text.c_str());
        return 2;
      }
      plan_memory = true, plan_live = *n;
    }
    else {
      std::fprintf(stderr, "bench_resnet_train: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  try {
    // The environment's switches apply to the planned device: a malformed one is an error.
    const std::optional<mn::plan::PlanOptions> planned_device = mn::bench::plan_device(plan_device);
    if (!planned_device) {
      std::fprintf(stderr, "bench_resnet_train: --plan-device takes default or h200, got '%s'\n",
                   plan_device.c_str());
      return 2;
    }
    for (int depth : depths_of(depths)) {
      const nlohmann::json j = plan_memory ? plan(depth, batch, size, so.precision, *planned_device,
                                                  plan_live, plan_kernels)
                                           : run(depth, batch, size, steps, so);
      std::cout << j.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resnet_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
