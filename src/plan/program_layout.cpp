#include "plan/program_layout.h"

#include <algorithm>
#include <map>

#include "plan/memory_plan.h"

namespace mn::plan {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool shared_kind(const Node& n) { return n.op_name() == "parameter" || n.op_name() == "state"; }

struct Shared {
  size_t request = 0;  // index into the persistent requests
  TensorType type;
  std::string kind, program;
};

// The persistent buffers of every plan as memory requests: the shared ones once (checking that
// every program agrees on their type), then each program's own. request_of[p][b]: the request
// of buffer b of plan p, or -1 for an intermediate.
std::vector<BufferRequest> persistent_requests(const std::vector<StepPlan*>& plans,
                                               const std::vector<std::string>& names,
                                               std::vector<std::vector<int>>& request_of) {
  std::vector<BufferRequest> requests;
  std::map<std::string, Shared, std::less<>> shared;
  request_of.assign(plans.size(), {});
  for (size_t p = 0; p < plans.size(); ++p) {
    const StepPlan& plan = *plans[p];
    request_of[p].assign(plan.buffers.size(), -1);
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      const PlannedBuffer& buf = plan.buffers[b];
      if (!buf.persistent) continue;
      const Node* n = buf.node >= 0 ? &plan.graph.node(buf.node) : nullptr;
      if (!n || !shared_kind(*n)) {
        request_of[p][b] = static_cast<int>(requests.size());
        requests.push_back({buf.bytes, 0, 0, true});
        continue;
      }
      auto [it, fresh] = shared.try_emplace(n->name, Shared{requests.size(), n->type,
                                                            std::string(n->op_name()), names[p]});
      if (fresh) {
        requests.push_back({buf.bytes, 0, 0, true});
      } else if (it->second.type != n->type || it->second.kind != n->op_name()) {
        throw Error("Session: " + std::string(n->op_name()) + " '" + n->name + "' is " +
                    n->type.str() + " in program '" + names[p] + "' but " + it->second.kind +
                    " " + it->second.type.str() + " in program '" + it->second.program + "'");
      }
      request_of[p][b] = static_cast<int>(it->second.request);
    }
  }
  return requests;
}

// Where a plan's intermediates start: right after the persistent tensors, unless one would then
// straddle a chunk boundary; then a shift by a multiple of the chunk size keeps each one inside
// its chunk.
uint64_t transient_base(const StepPlan& plan, uint64_t region, uint64_t chunk_bytes) {
  const uint64_t old_base = plan.memory.persistent_bytes;
  if (chunk_bytes == 0) return region;
  bool fits = true;
  for (const PlannedBuffer& b : plan.buffers) {
    if (b.persistent) continue;
    const uint64_t at = region + (b.offset - old_base);
    fits = fits && at / chunk_bytes == (at + std::max<uint64_t>(b.bytes, 1) - 1) / chunk_bytes;
  }
  if (fits) return region;
  return region + (old_base % chunk_bytes + chunk_bytes - region % chunk_bytes) % chunk_bytes;
}

}  // namespace

ProgramsLayout place_programs(const std::vector<StepPlan*>& plans,
                              const std::vector<std::string>& names, uint64_t alignment,
                              uint64_t chunk_bytes) {
  std::vector<std::vector<int>> request_of;
  const std::vector<BufferRequest> requests = persistent_requests(plans, names, request_of);
  ProgramsLayout layout;
  if (plans.size() == 1) {
    const StepPlan& p = *plans[0];
    layout.arena_bytes = p.arena_bytes;
    for (const PlannedBuffer& b : p.buffers) {
      const bool shared = b.persistent && b.node >= 0 && shared_kind(p.graph.node(b.node));
      if (shared) layout.shared_bytes += align_up(std::max<uint64_t>(b.bytes, 1), alignment);
    }
    layout.own_bytes = {p.memory.persistent_bytes - layout.shared_bytes};
    layout.transient_bytes = {p.arena_bytes - p.memory.persistent_bytes};
    return layout;
  }
  const MemoryPlan persistent = plan_memory(requests, alignment, chunk_bytes);
  const uint64_t region = align_up(persistent.arena_bytes, alignment);
  layout.arena_bytes = region;
  layout.own_bytes.assign(plans.size(), 0);
  std::vector<char> counted(requests.size(), 0);
  for (size_t p = 0; p < plans.size(); ++p) {
    StepPlan& plan = *plans[p];
    const uint64_t old_base = plan.memory.persistent_bytes;
    const uint64_t base = transient_base(plan, region, chunk_bytes);
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      PlannedBuffer& buf = plan.buffers[b];
      const int r = request_of[p][b];
      if (r >= 0) {
        buf.offset = persistent.offsets[static_cast<size_t>(r)];
        const bool shared = buf.node >= 0 && shared_kind(plan.graph.node(buf.node));
        if (!counted[static_cast<size_t>(r)]) {
          const uint64_t bytes = align_up(std::max<uint64_t>(buf.bytes, 1), alignment);
          (shared ? layout.shared_bytes : layout.own_bytes[p]) += bytes;
          counted[static_cast<size_t>(r)] = 1;
        }
      } else {
        buf.offset = base + (buf.offset - old_base);
      }
    }
    const uint64_t transient = plan.arena_bytes - old_base;
    layout.transient_bytes.push_back(transient);
    layout.arena_bytes = std::max(layout.arena_bytes, base + transient);
  }
  return layout;
}

}  // namespace mn::plan
