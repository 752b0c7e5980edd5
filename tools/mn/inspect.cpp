// `mn inspect <model> [--train] [--json]`: what the compiler makes of a built-in model: the
// optimized graph, the optimizer's report and the kernels that run, against one kernel per op
// of the graph as written.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>

#include "commands.h"
#include "optimize/optimize.h"
#include "plan/memory_breakdown.h"
#include "plan/step_plan.h"
#include "runtime/plan_options.h"

namespace mn::cli {

namespace {

struct InspectArgs {
  std::string model;
  bool train = false;
  bool json = false;
  bool graph = true;
  int64_t batch = 0;   // 0: the model's default
  int64_t layers = 0;  // transformer only; 0: 30
  std::string device;
};

// The model's graph; with --train, its whole training step (backward and AdamW).
std::unique_ptr<Graph> build_model(const InspectArgs& a) {
  std::unique_ptr<Graph> graph;
  Tensor loss;
  if (a.model == "transformer") {
    TransformerSpec s = smollm2_135m();
    if (a.batch > 0) s.batch = a.batch;
    if (a.layers > 0) s.layers = a.layers;
    s.with_loss = a.train;
    LanguageModel m = build_transformer(s);
    graph = std::move(m.graph);
    loss = m.loss;
  } else {
    ClassifierSpec s;
    s.kind = model_from_name(a.model);
    if (a.batch > 0) s.batch = a.batch;
    s.with_loss = a.train;
    s.training = a.train;
    Classifier c = build_classifier(s);
    graph = std::move(c.graph);
    loss = c.loss;
  }
  if (a.train) add_training_step(loss, Optimizer::adamw());
  return graph;
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// What fills the arena: persistent tensors by kind, and the intermediates live at the peak.
void print_memory(const plan::MemoryBreakdown& m, const plan::StepPlan& p) {
  std::printf("memory        arena %.1f MiB: persistent %.1f MiB, intermediates %.1f MiB\n",
              mib(p.arena_bytes), mib(p.memory.persistent_bytes), mib(m.transient_region_bytes));
  std::printf("  parameters  %10.1f MiB\n", mib(m.parameter_bytes));
  std::printf("  states      %10.1f MiB (optimizer moments, statistics, caches)\n",
              mib(m.state_bytes));
  std::printf("  io          %10.1f MiB (inputs, outputs, constants)\n", mib(m.io_bytes));
  if (m.peak_launch < 0) return;
  const std::string at = static_cast<size_t>(m.peak_launch) < p.launches.size()
                             ? p.launches[static_cast<size_t>(m.peak_launch)].kernel.name
                             : std::string("the assignments");
  std::printf("  peak of intermediates at dispatch %d (%s): %.1f MiB\n", m.peak_launch, at.c_str(),
              mib(m.peak_bytes()));
  std::printf("    activations %8.1f MiB (values the outputs depend on)\n",
              mib(m.activation_bytes));
  std::printf("    backward    %8.1f MiB (gradients, optimizer temporaries)\n",
              mib(m.backward_bytes));
  std::printf("    workspace   %8.1f MiB (kernel scratch)\n", mib(m.workspace_bytes));
}

void run_inspect(const InspectArgs& a, const CLI::App& cmd) {
  for (const auto& [name, value] :
       {std::pair{"--batch", a.batch}, std::pair{"--layers", a.layers}}) {
    const CLI::Option* opt = cmd.get_option(name);
    if (opt->count() > 0 && value < 1)
      throw Error(std::string(name) + " " + opt->results().back() + ": expected an integer >= 1");
  }
  if (a.model != "transformer") {
    try {
      model_from_name(a.model);
    } catch (const Error&) {
      throw Error("mn inspect: unknown model '" + a.model +
                  "' (expected mlp, cnn, resnet18, resnet34, resnet50 or transformer)");
    }
  }
  if (a.layers > 0 && a.model != "transformer")
    throw Error("mn inspect: --layers applies to the transformer only");
  std::unique_ptr<Graph> graph = build_model(a);
  const std::string device_name = runtime::device_name(a.device);

  const plan::PlanOptions options = runtime::plan_options(a.device);
  const plan::StepPlan after = plan::make_step_plan(*graph, options);
  // Baseline: the graph as written, one kernel per op.
  plan::PlanOptions baseline = options;
  baseline.optimize.enabled = false;
  baseline.fuse = false;
  const plan::StepPlan before = plan::make_step_plan(*graph, baseline);
  const optimize::OptimizeReport& r = after.report;
  const plan::MemoryBreakdown mem = plan::memory_breakdown(after);
  const size_t dispatches_before = before.launches.size(), dispatches_after = after.launches.size();

  if (a.json) {
    nlohmann::json rules = nlohmann::json::object();
    for (const auto& f : r.rules) rules[f.name] = f.count;
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& l : after.launches) kernels.push_back(l.kernel.name);
    nlohmann::json j = {{"model", a.model},
                        {"train", a.train},
                        {"device", device_name},
                        {"nodes_before", r.nodes_before},
                        {"nodes_after", r.nodes_after},
                        {"dispatches_before", dispatches_before},
                        {"dispatches_after", dispatches_after},
                        {"bytes_before", r.bytes_before},
                        {"bytes_after", r.bytes_after},
                        {"flops_before", r.flops_before},
                        {"flops_after", r.flops_after},
                        {"arena_bytes_before", before.arena_bytes},
                        {"arena_bytes_after", after.arena_bytes},
                        {"memory",
                         {{"parameter_bytes", mem.parameter_bytes},
                          {"state_bytes", mem.state_bytes},
                          {"io_bytes", mem.io_bytes},
                          {"persistent_workspace_bytes", mem.persistent_workspace_bytes},
                          {"transient_region_bytes", mem.transient_region_bytes},
                          {"peak_launch", mem.peak_launch},
                          {"activation_bytes", mem.activation_bytes},
                          {"backward_bytes", mem.backward_bytes},
                          {"workspace_bytes", mem.workspace_bytes}}},
                        {"egraph",
                         {{"enodes", r.enodes},
                          {"eclasses", r.eclasses},
                          {"iterations", r.iterations},
                          {"seconds", r.seconds},
                          {"stop_reason", r.stop_reason},
                          {"rules", rules}}},
                        {"kernels", kernels}};
    if (a.graph) {
      nlohmann::json lines = nlohmann::json::array();
      std::string text = after.graph.str();
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        lines.push_back(text.substr(start, end - start));
        start = end + 1;
      }
      j["graph"] = lines;
    }
    std::cout << j.dump(2) << '\n';
    return;
  }

  if (a.graph) std::printf("# optimized graph\n%s\n", after.graph.str().c_str());
  std::printf("# kernels (%zu dispatches)\n", dispatches_after);
  for (size_t i = 0; i < after.launches.size(); ++i)
    std::printf("%5zu  %s\n", i, after.launches[i].kernel.name.c_str());
  std::printf("\n# report: %s%s on %s\n", a.model.c_str(), a.train ? " (training step)" : "",
              device_name.c_str());
  std::printf("e-graph       %zu e-nodes, %zu e-classes, %zu iterations, %.3f s, stop: %s\n",
              r.enodes, r.eclasses, r.iterations, r.seconds, r.stop_reason.c_str());
  std::printf("nodes         %zu -> %zu (compute nodes the step needs)\n", r.nodes_before,
              r.nodes_after);
  std::printf("dispatches    %zu -> %zu (%.1fx fewer)\n", dispatches_before, dispatches_after,
              dispatches_after ? static_cast<double>(dispatches_before) / dispatches_after : 0.0);
  std::printf("bytes (est.)  %.4g -> %.4g\n", r.bytes_before, r.bytes_after);
  std::printf("flops (est.)  %.4g -> %.4g\n", r.flops_before, r.flops_after);
  std::printf("arena bytes   %llu -> %llu\n", static_cast<unsigned long long>(before.arena_bytes),
              static_cast<unsigned long long>(after.arena_bytes));
  print_memory(mem, after);
  std::printf("rules fired\n");
  for (const auto& f : r.rules) std::printf("  %-40s %zu\n", f.name.c_str(), f.count);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show the optimized graph, the optimizer's report and the kernel list of a model");
  cmd->add_option("model", args->model, "mlp, cnn or transformer")->required();
  cmd->add_flag("--train", args->train, "The whole training step: backward and AdamW");
  cmd->add_flag("--json", args->json, "One JSON object on stdout");
  cmd->add_flag("!--no-graph", args->graph, "Leave the optimized graph out");
  cmd->add_option("--batch", args->batch, "Batch size (default: the model's)");
  cmd->add_option("--layers", args->layers, "Transformer layers (default 30)");
  cmd->add_option("--device", args->device, "Device whose kernels are planned (index or name)");
  cmd->callback([args, cmd] { run_inspect(*args, *cmd); });
}

}  // namespace mn::cli
