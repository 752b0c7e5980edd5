// SmolVLA's action expert on the GPU at lerobot/smolvla_base's sizes with random weights: the
// denoising loop (num_steps Euler steps over a chunk of 50 actions, one submission) and a
// flow-matching training step (AdamW, the VLM's keys and values given), over a prefix of
// random keys and values. One JSON line per (mode, batch). PyTorch counterpart:
// bench/smolvla.py (the re-implementation of lerobot's expert in tests/fixtures/smolvla).
//
// Usage: bench_smolvla [--batch 1,8] [--prefix 241] [--steps 20] [--modes sample,train]
//                      [--profile] [--device D] [--plan-device default|h200] [--plan-order]
// --plan-device plans each step for that device instead of running it and prints its arena and
// launches by kernel name; --plan-order also lists the launches in dispatch order with the
// nodes each covers.
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
#include <meganeura/vla.h>

namespace {

using mn::bench::ms_since;
using mn::bench::random_array;

struct Options {
  int64_t prefix = 241;  // 3 images of 64 tokens, 48 of language, 1 of state
  int steps = 20;
  bool profile = false;
  std::string device;
  bool plan_order = false;                       // --plan-order: and list the launches
  std::optional<mn::plan::PlanOptions> planned;  // --plan-device: plan, do not run
};

void set_prefix(mn::Session& s, const mn::vla::SmolVlaConfig& c, int64_t batch, int64_t prefix) {
  const mn::Shape kv{batch, prefix, c.kv_heads, c.head_dim};
  for (int64_t l = 0; l < c.layers; ++l) {
    s.set("prefix_keys." + std::to_string(l), random_array(kv, 10 + 2 * l));
    s.set("prefix_values." + std::to_string(l), random_array(kv, 11 + 2 * l));
  }
  s.set("prefix_mask", mn::Array::full({batch, prefix}, 1.0));
}

nlohmann::json run(const std::string& mode, int64_t batch, const Options& o) {
  const mn::vla::SmolVlaConfig c = mn::vla::smolvla_base_config();
  mn::vla::SmolVlaActionExpert expert(c);
  mn::Graph g;
  const mn::vla::VlmPrefix prefix = expert.prefix_inputs(g, batch, o.prefix);
  const mn::Shape actions{batch, c.chunk, c.max_action_dim};
  const bool training = mode == "train";
  if (training) {
    mn::Tensor loss = expert.flow_matching_loss(
        prefix, g.input("actions", actions), g.input("noise", actions), g.input("time", {batch}));
    mn::add_training_step(loss, mn::Optimizer::adamw({.lr = 1e-4}));
  } else if (mode == "sample") {
    g.output("actions", expert.sample(prefix, g.input("noise", actions)));
  } else {
    throw mn::Error("bench_smolvla: unknown mode '" + mode + "' (expected sample or train)");
  }
  nlohmann::json j = {{"bench", "smolvla"},      {"framework", "meganeura"}, {"mode", mode},
                      {"batch", batch},          {"prefix", o.prefix},       {"chunk", c.chunk},
                      {"num_steps", c.num_steps}};
  if (o.planned) {
    const mn::plan::StepPlan plan = mn::plan::make_step_plan(g, *o.planned);
    j.update(mn::bench::plan_summary(plan));
    if (o.plan_order) j["order"] = mn::bench::launch_order(plan);
    return j;
  }
  mn::SessionOptions so;
  so.device = o.device;
  so.profile = o.profile;
  const auto t0 = std::chrono::steady_clock::now();
  auto s = mn::build_session(g, so);
  const double build_ms = ms_since(t0);
  set_prefix(*s, c, batch, o.prefix);
  s->set("noise", random_array(actions, 1, mn::bench::Draw::normal));
  std::optional<mn::OptimizerStepper> stepper;
  if (training) {
    s->set("actions", random_array(actions, 2));
    s->set("time", random_array({batch}, 3));  // any times: the step's cost does not depend on them
    stepper.emplace(mn::Optimizer::adamw({.lr = 1e-4}));
  }
  std::vector<double> ms;
  for (int i = 0; i < o.steps + 3; ++i) {
    const auto t = std::chrono::steady_clock::now();
    if (stepper) {
      stepper->step(*s);
    } else {
      s->step();
    }
    (void)s->get(training ? "loss" : "actions");
    if (i >= 3) ms.push_back(ms_since(t));
  }
  j["build_ms"] = build_ms;
  j.update(mn::bench::step_fields(*s, ms, o.profile));
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string batches = "1,8", modes = "sample,train";
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--batch"))
      batches = next();
    else if (!std::strcmp(argv[i], "--prefix"))
      o.prefix = std::atoll(next().c_str());
    else if (!std::strcmp(argv[i], "--steps"))
      o.steps = std::atoi(next().c_str());
    else if (!std::strcmp(argv[i], "--modes"))
      modes = next();
    else if (!std::strcmp(argv[i], "--profile"))
      o.profile = true;
    else if (!std::strcmp(argv[i], "--plan-order"))
      o.plan_order = true;
    else if (!std::strcmp(argv[i], "--device"))
      o.device = next();
    else if (!std::strcmp(argv[i], "--plan-device")) {
      const std::string name = next();
      if (!(o.planned = mn::bench::plan_device(name)))
        throw mn::Error("--plan-device takes default or h200, got '" + name + "'");
    } else
      throw mn::Error(std::string("bench_smolvla: unknown option ") + argv[i]);
  }
  for (const std::string& mode : mn::bench::split(modes)) {
    for (const std::string& b : mn::bench::split(batches)) {
      std::cout << run(mode, std::stoll(b), o).dump() << std::endl;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_smolvla: %s\n", e.what());
  return 1;
}
