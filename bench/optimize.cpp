// How long the optimizer takes on whole training steps (forward + backward + AdamW) of the
// built-in models, and what it buys: e-graph size and speed, nodes, estimated bytes and the
// dispatch count against one kernel per op. Planning uses the device traits of the default
// device (the dispatch count depends on them, e.g. through the binding limit of fused updates).
// One JSON line per model. There is no PyTorch counterpart: this is compile time.
//
// Usage: bench_optimize [--repeats N] [--layers L] [--device D]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>

#include "optimize/optimize.h"
#include "plan/step_plan.h"
#include "runtime/plan_options.h"

namespace {

std::unique_ptr<mn::Graph> training_step(const std::string& model, int64_t layers) {
  std::unique_ptr<mn::Graph> g;
  mn::Tensor loss;
  if (model == "transformer") {
    mn::TransformerSpec s = mn::smollm2_135m();
    if (layers > 0) s.layers = layers;
    mn::LanguageModel m = mn::build_transformer(s);
    g = std::move(m.graph);
    loss = m.loss;
  } else {
    mn::ClassifierSpec s;
    s.kind = mn::model_from_name(model);
    mn::Classifier c = mn::build_classifier(s);
    g = std::move(c.graph);
    loss = c.loss;
  }
  mn::add_training_step(loss, mn::Optimizer::adamw());
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3;
  int64_t layers = 0;
  std::string device;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--layers") && i + 1 < argc)
      layers = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc)
      device = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_optimize [--repeats N] [--layers L] [--device D]\n");
      return 2;
    }
  }
  try {
    const mn::plan::PlanOptions base = mn::runtime::plan_options(device);
    for (const std::string model : {"mlp", "cnn", "transformer"}) {
      auto g = training_step(model, layers);
      std::vector<double> seconds;
      mn::optimize::OptimizeReport report;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        mn::optimize::OptimizeResult res = mn::optimize::optimize(*g);
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        report = std::move(res.report);
      }
      std::sort(seconds.begin(), seconds.end());
      mn::plan::PlanOptions off = base;
      off.optimize.enabled = false;
      off.fuse = false;
      const size_t before = mn::plan::make_step_plan(*g, off).launches.size();
      const size_t after = mn::plan::make_step_plan(*g, base).launches.size();
      const double median = seconds[seconds.size() / 2];
      nlohmann::json rules = nlohmann::json::object();
      for (const auto& f : report.rules) rules[f.name] = f.count;
      nlohmann::json j = {{"name", "optimize_" + model + "_train"},
                          {"optimize_s_median", median},
                          {"optimize_s_min", seconds.front()},
                          {"saturation_s", report.seconds},
                          {"enodes", report.enodes},
                          {"eclasses", report.eclasses},
                          {"enodes_per_s", static_cast<double>(report.enodes) / median},
                          {"iterations", report.iterations},
                          {"stop_reason", report.stop_reason},
                          {"nodes_before", report.nodes_before},
                          {"nodes_after", report.nodes_after},
                          {"bytes_before", report.bytes_before},
                          {"bytes_after", report.bytes_after},
                          {"dispatches_before", before},
                          {"dispatches_after", after},
                          {"rules", rules}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optimize: %s\n", e.what());
    return 1;
  }
  return 0;
}
