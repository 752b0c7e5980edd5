// Training-step time of the built-in transformer (SmolLM2-135M's shape by default): one step =
// upload the tokens, forward, backward and AdamW in one submission, read the loss back. Runs
// the graph as written (one kernel per op) and optimized (e-graph + fusion) in the same process
// and prints one JSON line each. PyTorch counterpart: bench/transformer_train.py.
// --plan only plans each step (no device, no run) and prints its arena and dispatch count;
// --plan-kernels also counts the launches of each kernel name, --plan-order lists the launches in
// dispatch order with the nodes each covers, --plan-memory says what fills the arena at its
// peak, --plan-live N also lists the N largest buffers live there.
//
// --model causal_lm builds the step from build_causal_lm with SmolLM2-135M's config instead
// (Hugging Face's LlamaForCausalLM: composite attention, rms_norm and silu, the loss's shift
// inside), the graph that loading the real model gives, as bench/transformer_train.py runs it;
// the default, `transformer`, is build_transformer's graph in primitive ops, as an exporter
// writes it, which the optimizer has to recognise.
//
// Usage: bench_transformer_train [--steps N] [--layers L] [--batch B] [--sequence S]
//                                [--device D] [--only optimized|baseline] [--profile] [--plan]
//                                [--precision f32|bf16|f16]   (SessionOptions::precision)
//                                [--model transformer|causal_lm]
//                                [--plan-device default|h200]   (the device --plan* plan for)
//                                [--plan-kernels] [--plan-order] [--plan-memory] [--plan-live N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

#include <meganeura/causal_lm.h>
#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "plan_device.h"
#include "plan_memory.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The step's plan as a session would make it, without a device: arena and dispatches.
// Launches are counted by kernel name (--plan-kernels).
nlohmann::json plan_fields(const mn::Graph& g, bool optimized, mn::DType precision,
                           const mn::plan::PlanOptions& device, bool kernels, bool memory,
                           size_t live, bool order) {
  mn::plan::PlanOptions po = device;
  po.optimize.enabled = po.fuse = optimized;
  po.precision = precision;
  const mn::plan::StepPlan plan = mn::plan::make_step_plan(g, po);
  nlohmann::json j = mn::bench::plan_summary(plan, kernels);
  j["copies"] = plan.assignment_copies.size();
  if (memory) j["memory"] = mn::bench::peak_fields(plan);
  if (live) j["live_at_peak"] = mn::bench::live_at_peak(plan, live);
  if (order) j["order"] = mn::bench::launch_order(plan);
  return j;
}

// The training step's graph and the names of its token and target inputs.
struct StepGraph {
  std::unique_ptr<mn::Graph> graph;
  std::string tokens, targets;
  bool shifted_inside = false;  // targets = tokens (the model shifts them), as transformers does
};

StepGraph step_graph(const std::string& model, const mn::TransformerSpec& spec) {
  if (model == "transformer") {
    mn::LanguageModel m = mn::build_transformer(spec);
    mn::add_training_step(m.loss, mn::Optimizer::adamw());
    return {std::move(m.graph), "tokens", "targets", false};
  }
  if (model != "causal_lm") {
    throw mn::Error("--model must be transformer or causal_lm, got '" + model + "'");
  }
  mn::CausalLmOptions o;
  o.batch = spec.batch;
  o.sequence = spec.sequence;
  o.with_loss = true;
  o.logits_output = false;  // the step returns its loss, as bench/transformer_train.py's
  mn::CausalLm m = mn::build_causal_lm(mn::llama_config(spec), o);
  mn::add_training_step(m.loss, mn::Optimizer::adamw());
  return {std::move(m.graph), "input_ids", "labels", true};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30;
  std::string device, only;
  bool profile = false, plan_only = false, plan_kernels = false, plan_memory = false;
  bool plan_order = false;
  size_t plan_live = 0;
  std::string precision = "f32", model = "transformer", plan_device = "default";
  mn::TransformerSpec spec = mn::smollm2_135m();
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(next());
    else if (!std::strcmp(argv[i], "--layers"))
      spec.layers = std::atoi(next());
    else if (!std::strcmp(argv[i], "--batch"))
      spec.batch = std::atoi(next());
    else if (!std::strcmp(argv[i], "--sequence"))
      spec.sequence = std::atoi(next());
    else if (!std::strcmp(argv[i], "--device"))
      device = next();
    else if (!std::strcmp(argv[i], "--only"))
      only = next();
    else if (!std::strcmp(argv[i], "--profile"))
      profile = true;
    else if (!std::strcmp(argv[i], "--plan"))
      plan_only = true;
    else if (!std::strcmp(argv[i], "--plan-kernels"))
      plan_only = plan_kernels = true;
    else if (!std::strcmp(argv[i], "--plan-order"))
      plan_only = plan_order = true;
    else if (!std::strcmp(argv[i], "--plan-memory"))
      plan_only = plan_memory = true;
    else if (!std::strcmp(argv[i], "--plan-live")) {
      const char* text = next();
      const std::optional<size_t> n = mn::bench::live_count(text);
      if (!n) {
        std::fprintf(stderr,
                     "bench_transformer_train: --plan-live takes a positive count of buffers, "
                     "got '%s'\n",
                     text);
        return 2;
      }
      plan_only = plan_memory = true, plan_live = *n;
    } else if (!std::strcmp(argv[i], "--plan-device"))
      plan_device = next();
    else if (!std::strcmp(argv[i], "--precision"))
      precision = next();
    else if (!std::strcmp(argv[i], "--model"))
      model = next();
    else {
      std::fprintf(stderr,
                   "bench_transformer_train: unknown argument '%s' (usage: see the head of "
                   "bench/transformer_train.cpp)\n",
                   argv[i]);
      return 2;
    }
  }
  const std::string name = "smollm2_135m_train_b" + std::to_string(spec.batch) + "_s" +
                           std::to_string(spec.sequence) +
                           (spec.layers == 30 ? "" : "_l" + std::to_string(spec.layers)) +
                           (model == "transformer" ? "" : "_" + model);
  try {
    // The environment's switches apply to the planned device: a malformed one is an error.
    const std::optional<mn::plan::PlanOptions> planned_device = mn::bench::plan_device(plan_device);
    if (!planned_device) {
      std::fprintf(stderr,
                   "bench_transformer_train: --plan-device takes default or h200, got '%s'\n",
                   plan_device.c_str());
      return 2;
    }
    for (bool optimized : {false, true}) {
      if (!only.empty() && only != (optimized ? "optimized" : "baseline")) continue;
      const StepGraph m = step_graph(model, spec);
      if (plan_only) {
        nlohmann::json j =
            plan_fields(*m.graph, optimized, mn::dtype_from_name(precision), *planned_device,
                        plan_kernels, plan_memory, plan_live, plan_order);
        j.update({{"name", name},
                  {"impl", "meganeura"},
                  {"optimized", optimized},
                  {"precision", precision}});
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
        continue;
      }
      mn::SessionOptions so;
      so.device = device;
      so.profile = profile;
      so.optimize = optimized;
      so.precision = mn::dtype_from_name(precision);
      const auto t0 = std::chrono::steady_clock::now();
      auto s = mn::build_session(*m.graph, so);
      const double compile_s = seconds_since(t0);
      // Random tokens; targets are the next token (the last position is ignored).
      std::mt19937 rng(1);
      const auto n = static_cast<size_t>(spec.batch * spec.sequence);
      std::vector<int32_t> tokens(n), targets(n);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % spec.vocab);
      for (size_t i = 0; i < n; ++i)
        targets[i] = m.shifted_inside                 ? tokens[i]
                     : (i + 1) % spec.sequence == 0 ? -100
                                                      : tokens[i + 1];
      s->set(m.tokens, tokens);
      s->set(m.targets, targets);
      std::vector<double> times;
      double loss = 0, first_loss = 0;
      for (int i = 0; i < steps + 3; ++i) {
        auto t1 = std::chrono::steady_clock::now();
        for (const auto& [n, v] : mn::step_scalars(mn::Optimizer::adamw(), 1e-4, i + 1))
          s->set_scalar(n, v);
        s->step();
        loss = s->get("loss").data[0];
        if (i == 0) first_loss = loss;
        if (i >= 3) times.push_back(seconds_since(t1) * 1e3);
      }
      nlohmann::json j = mn::bench::step_fields(*s, times, profile);
      j.update({{"name", name},
                {"impl", "meganeura"},
                {"optimized", optimized},
                {"precision", precision},
                {"steps", steps},
                {"compile_s", compile_s},
                {"first_loss", first_loss},
                {"final_loss", loss}});
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_transformer_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
