#include "plan/memory_breakdown.h"

#include <algorithm>
#include <array>
#include <vector>

#include "schedule/fusion.h"

namespace mn::plan {

namespace {

void add_persistent(MemoryBreakdown& m, const StepPlan& p, const PlannedBuffer& b) {
  if (b.node < 0) {
    m.persistent_workspace_bytes += b.bytes;
    return;
  }
  const std::string_view op = p.graph.node(b.node).op_name();
  if (op == "parameter") {
    m.parameter_bytes += b.bytes;
  } else if (op == "state") {
    m.state_bytes += b.bytes;
  } else {
    m.io_bytes += b.bytes;
  }
}

}  // namespace

MemoryBreakdown memory_breakdown(const StepPlan& p) {
  MemoryBreakdown m;
  const std::vector<char> forward = schedule::forward_nodes(p.graph);
  // Live transient bytes per launch, by role (a difference array over launch indices).
  const size_t n = p.launches.size() + 1;
  enum Role { activation, backward, workspace };
  std::vector<std::array<int64_t, 3>> delta(n + 1, {0, 0, 0});
  for (const PlannedBuffer& b : p.buffers) {
    if (b.persistent) {
      add_persistent(m, p, b);
      continue;
    }
    const Role r = b.node < 0                          ? workspace
                   : forward[static_cast<size_t>(b.node)] ? activation
                                                          : backward;
    const auto first = static_cast<size_t>(std::clamp(b.first_use, 0, static_cast<int>(n - 1)));
    const auto last = static_cast<size_t>(std::clamp(b.last_use, b.first_use, static_cast<int>(n - 1)));
    delta[first][r] += static_cast<int64_t>(b.bytes);
    delta[last + 1][r] -= static_cast<int64_t>(b.bytes);
  }
  std::array<int64_t, 3> live{0, 0, 0};
  int64_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < 3; ++r) live[r] += delta[i][r];
    const int64_t total = live[0] + live[1] + live[2];
    if (total > best) {
      best = total;
      m.peak_launch = static_cast<int>(i);
      m.activation_bytes = static_cast<uint64_t>(live[activation]);
      m.backward_bytes = static_cast<uint64_t>(live[backward]);
      m.workspace_bytes = static_cast<uint64_t>(live[workspace]);
    }
  }
  // Placement puts the persistent buffers first (memory_plan.h).
  const uint64_t persistent = p.memory.persistent_bytes;
  m.transient_region_bytes = p.arena_bytes > persistent ? p.arena_bytes - persistent : 0;
  return m;
}

}  // namespace mn::plan
