// Whisper's encoder on the GPU: inference over a batch of 30-second log-mel windows (random
// features), and a training step (loss sum(y · w), SGD) at openai/whisper-tiny and -base sizes
// with random weights. One JSON line per (size, batch, mode). PyTorch counterpart:
// bench/whisper_encoder.py (transformers' WhisperEncoder, same sizes), whose hidden states stay
// on the GPU: so do ours (no readback in the timed steps; read once after them, and
// "finite" says whether every value was), unless --read-back times the copy to the host in
// every step as well. "gpu_ms_median" is the step's GPU time, first dispatch to last.
//
// Usage: bench_whisper_encoder [--sizes tiny,base] [--batch 1,8] [--steps 20] [--profile]
//                              [--modes inference,train] [--read-back] [--device D]
//                              [--plan-device default|h200]
//                              [--plan-order]
// --plan-device plans each step for that device instead of running it (no device needed) and
// prints its arena and launches by kernel name; --plan-order also lists the launches in
// dispatch order with the nodes each covers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "plan_device.h"
#include "plan_memory.h"

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/speech.h>

namespace {

using mn::bench::ms_since;
using mn::bench::random_array;
using mn::bench::split;

nlohmann::json run(const std::string& size, int64_t batch, bool training, int steps,
                   const std::string& device, bool profile, bool read_back,
                   const std::optional<mn::plan::PlanOptions>& planned, bool plan_order) {
  const mn::speech::WhisperEncoderConfig c = mn::speech::whisper_encoder_config(size);
  auto enc = mn::speech::whisper_encoder(c);
  enc->train(training);
  mn::Graph g;
  const mn::Shape x_shape{batch, c.num_mel_bins, 2 * c.max_source_positions};
  mn::Tensor y = enc->forward(g.input("x", x_shape));
  g.output("y", y);
  if (training) {
    mn::Tensor w = g.input("w", y.shape());
    mn::add_training_step(sum(y * w), mn::Optimizer::sgd());
  }
  nlohmann::json j = {{"bench", "whisper_encoder"},
                      {"framework", "meganeura"},
                      {"size", size},
                      {"batch", batch},
                      {"mode", training ? "train" : "inference"}};
  if (planned) {
    const mn::plan::StepPlan plan = mn::plan::make_step_plan(g, *planned);
    j.update(mn::bench::plan_summary(plan));
    if (plan_order) j["order"] = mn::bench::launch_order(plan);
    return j;
  }
  mn::SessionOptions so;
  so.device = device;
  so.profile = profile;
  so.time_steps = !profile;
  const auto t0 = std::chrono::steady_clock::now();
  mn::SessionProgram program{"step", &g, {}};
  if (!read_back) program.read_back = std::vector<std::string>{};
  auto s = mn::build_session({program}, so);
  const double build_ms = ms_since(t0);
  s->set("x", random_array(x_shape, 1));
  if (training) {
    s->set("w", random_array(y.shape(), 2));
    s->set_scalar(mn::StepInputs::lr, 1e-6);
  }
  std::vector<double> ms, gpu_ms;
  for (int i = 0; i < steps + 3; ++i) {
    if (training) s->set_scalar(mn::StepInputs::step, static_cast<double>(i + 1));
    const auto t = std::chrono::steady_clock::now();
    s->step();
    if (read_back) (void)s->get("y");
    if (i < 3) continue;
    ms.push_back(ms_since(t));
    if (!profile) gpu_ms.push_back(s->step_gpu_ms("step"));
  }
  const mn::Array y_host = s->get("y");
  j["finite"] = std::all_of(y_host.data.begin(), y_host.data.end(),
                            [](double v) { return std::isfinite(v); });
  j["read_back"] = read_back;
  j["build_ms"] = build_ms;
  j.update(mn::bench::step_fields(*s, ms, profile));
  if (!profile) j["gpu_ms_median"] = mn::bench::median(gpu_ms);
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string sizes = "tiny,base", batches = "1,8", modes = "inference,train", device, plan_device;
  int steps = 20;
  bool profile = false, read_back = false, plan_order = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--sizes")) sizes = next();
    else if (!std::strcmp(argv[i], "--batch")) batches = next();
    else if (!std::strcmp(argv[i], "--modes"))
      modes = next();
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(next().c_str());
    else if (!std::strcmp(argv[i], "--device")) device = next();
    else if (!std::strcmp(argv[i], "--profile")) profile = true;
    else if (!std::strcmp(argv[i], "--read-back"))
      read_back = true;
    else if (!std::strcmp(argv[i], "--plan-order"))
      plan_order = true;
    else if (!std::strcmp(argv[i], "--plan-device"))
      plan_device = next();
    else throw mn::Error(std::string("bench_whisper_encoder: unknown option ") + argv[i]);
  }
  std::optional<mn::plan::PlanOptions> planned;
  if (!plan_device.empty() && !(planned = mn::bench::plan_device(plan_device))) {
    throw mn::Error("--plan-device takes default or h200, got '" + plan_device + "'");
  }
  for (const std::string& size : split(sizes)) {
    for (const std::string& b : split(batches)) {
      for (const std::string& mode : split(modes)) {
        if (mode != "inference" && mode != "train") {
          throw mn::Error("--modes takes inference and/or train, got '" + mode + "'");
        }
        const bool training = mode == "train";
        std::cout << run(size, std::stoll(b), training, steps, device, profile, read_back, planned,
                         plan_order)
                         .dump()
                  << std::endl;
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_whisper_encoder: %s\n", e.what());
  return 1;
}
