#pragma once
// What a planned step launches and what fills its arena, for the benchmarks that plan without a
// device (--plan-kernels, --plan-memory).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/barrier_windows.h"
#include "plan/memory_breakdown.h"
#include "plan/step_plan.h"

namespace mn::bench {

// The plan's launches counted by kernel name (--plan-kernels).
inline nlohmann::json kernel_counts(const plan::StepPlan& plan) {
  std::map<std::string, int> counts;
  for (const auto& l : plan.launches) ++counts[l.kernel.name];
  return counts;
}

// The plan's launches in dispatch order (--plan-order), each "wN kernel :: op(type) ... <- the
// types of what it reads": the barrier window it runs in, where launches go and which nodes
// each kernel covers.
inline nlohmann::json launch_order(const plan::StepPlan& plan) {
  nlohmann::json order = nlohmann::json::array();
  const std::vector<int> ends = plan::barrier_run_ends(plan.launches, true);
  int window = 0;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const plan::PlannedLaunch& l = plan.launches[i];
    std::string line = "w" + std::to_string(window) + " " + l.kernel.name + " ::";
    if (ends[i] == static_cast<int>(i)) ++window;
    for (NodeId n : l.nodes) {
      const Node& node = plan.graph.node(n);
      line += " " + std::string(node.op_name()) + "(" + node.type.str() + ")";
    }
    if (l.group < 0) {  // a launch of no kernel group (a cache prefetch): it computes nothing
      order.push_back(std::move(line));
      continue;
    }
    line += " <-";
    for (NodeId n : plan.groups[static_cast<size_t>(l.group)].inputs) {
      line += " " + plan.graph.node(n).type.str();
    }
    order.push_back(std::move(line));
  }
  return order;
}

// A planned step's arena and launches, and with `kernels` its launches by kernel name.
inline nlohmann::json plan_summary(const plan::StepPlan& p, bool kernels = true) {
  nlohmann::json j{{"arena_mib", static_cast<double>(p.arena_bytes) / (1 << 20)},
                   {"dispatches", p.launches.size()},
                   {"barrier_windows", plan::barrier_windows(p.launches)},
                   {"dependency_depth", plan::dependency_depth(p.launches)}};
  if (kernels) j["kernels"] = kernel_counts(p);
  return j;
}

// The step of `g` as a session would plan it for `po`, without a device (--plan-device).
inline nlohmann::json plan_summary(const Graph& g, const plan::PlanOptions& po) {
  return plan_summary(plan::make_step_plan(g, po));
}

// What fills the arena at the plan's peak: the breakdown's roles, and the live transient bytes
// summed by the op that computes them (in MiB), largest first.
inline nlohmann::json peak_fields(const plan::StepPlan& plan) {
  const plan::MemoryBreakdown m = plan::memory_breakdown(plan);
  auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  std::map<std::string, uint64_t> by_op;
  for (const plan::PlannedBuffer& b : plan.buffers) {
    if (b.persistent || b.first_use > m.peak_launch || b.last_use < m.peak_launch) continue;
    by_op[b.node < 0 ? "(scratch)" : std::string(plan.graph.node(b.node).op_name())] += b.bytes;
  }
  std::vector<std::pair<uint64_t, std::string>> sorted;
  for (const auto& [op, bytes] : by_op) sorted.emplace_back(bytes, op);
  std::sort(sorted.rbegin(), sorted.rend());
  nlohmann::json live = nlohmann::json::array();
  for (const auto& [bytes, op] : sorted) live.push_back({op, mib(bytes)});
  return {{"parameters", mib(m.parameter_bytes)},
          {"states", mib(m.state_bytes)},
          {"io", mib(m.io_bytes)},
          {"peak_launch", m.peak_launch},
          {"activations", mib(m.activation_bytes)},
          {"backward", mib(m.backward_bytes)},
          {"workspace", mib(m.workspace_bytes)},
          {"transient_region", mib(m.transient_region_bytes)},
          {"live_by_op", live}};
}

// The N of `--plan-live N`: a positive count of buffers, or nullopt (the caller says so).
inline std::optional<size_t> live_count(const char* text) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (!text[0] || *end || text[0] == '-' || n == 0) return std::nullopt;
  return static_cast<size_t>(n);
}

// The `count` largest transient buffers live at the plan's peak: the node (id, op, shape), its
// bytes, and the launches that write it first and read it last, to see why it is still there.
inline nlohmann::json live_at_peak(const plan::StepPlan& plan, size_t count) {
  const int peak = plan::memory_breakdown(plan).peak_launch;
  std::vector<const plan::PlannedBuffer*> live;
  for (const plan::PlannedBuffer& b : plan.buffers) {
    if (!b.persistent && b.first_use <= peak && b.last_use >= peak) live.push_back(&b);
  }
  std::sort(live.begin(), live.end(),
            [](const auto* a, const auto* b) { return a->bytes > b->bytes; });
  auto launch_name = [&](int i) {
    return i < static_cast<int>(plan.launches.size()) ? std::to_string(i) + " " +
                                                            plan.launches[i].kernel.name
                                                      : std::string("end");
  };
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < std::min(count, live.size()); ++i) {
    const plan::PlannedBuffer& b = *live[i];
    nlohmann::json j{{"mib", static_cast<double>(b.bytes) / (1 << 20)},
                     {"first", launch_name(b.first_use)},
                     {"last", launch_name(b.last_use)}};
    if (b.node >= 0) {
      const Node& n = plan.graph.node(b.node);
      j["node"] = b.node;
      j["op"] = n.op_name();
      j["shape"] = n.type.shape;
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace mn::bench
