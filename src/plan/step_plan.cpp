#include "plan/step_plan.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "codegen/index_check.h"
#include "codegen/lower_cache_prefetch.h"
#include "codegen/widened_operands.h"
#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "optimize/mixed_precision.h"
#include "plan/barrier_windows.h"
#include "plan/cache_prefetch.h"
#include "plan/in_place.h"
#include "plan/launch_levels.h"
#include "plan/shared_launches.h"
#include "schedule/attention_partials.h"
#include "schedule/cache_append.h"
#include "schedule/fusion.h"
#include "schedule/gemv_fusion.h"
#include "schedule/gpu_lowering.h"
#include "schedule/grad_kv.h"
#include "schedule/narrowed_stores.h"
#include "schedule/permuted_rotations.h"
#include "schedule/permuted_stores.h"
#include "schedule/reduction_operands.h"
#include "schedule/rematerialize.h"
#include "schedule/rope_fusion.h"
#include "schedule/row_tails.h"
#include "schedule/saved_lse.h"
#include "schedule/shared_statistics.h"
#include "schedule/stacked_rotations.h"
#include "schedule/widened_loads.h"
#include "support/env_switch.h"

namespace mn::plan {

uint64_t device_bytes(const TensorType& t) {
  return std::max<uint64_t>(1, static_cast<uint64_t>(t.numel())) * dtype_size(t.dtype);
}

namespace {

// The kernels, buffers and arena of `p`, whose graph is optimized and lowered: `recomputed`
// marks the copies schedule::rematerialize made (empty: none).
void schedule_and_place(StepPlan& p, const PlanOptions& options, bool off,
                        std::vector<char> recomputed, bool eager_gradients) {
  const Graph& g = p.graph;
  const size_t n = g.size();

  const std::vector<char> needed = schedule::needed_nodes(g);
  const bool trains =
      std::any_of(g.assignments().begin(), g.assignments().end(),
                  [&](const auto& a) { return g.node(a.first).op_name() == "parameter"; });
  // MN_FUSION=0: one kernel per node (the fusion's tests and measurements).
  const bool fuse = options.fuse && !off && support::env_switch("MN_FUSION", true);
  schedule::FusionOptions fo;
  // Past a few hundred bindings a launch saves nothing more (and descriptor sets grow).
  fo.max_bindings = std::min<uint32_t>(options.device.max_storage_buffers, 256);
  // A training step's backward kernels launch in the backward pass: one whose inputs are all
  // forward values (a recomputed copy, or a gradient's factor of saved activations) would
  // otherwise launch as soon as they exist and keep its value through the rest of the forward.
  if (!g.assignments().empty()) {
    const std::vector<char> forward = schedule::forward_nodes(g);
    recomputed.resize(n, 0);
    for (size_t i = 0; i < n; ++i) recomputed[i] = recomputed[i] || !forward[i];
  }
  fo.deferred = std::move(recomputed);
  fo.eager_gradients = eager_gradients;
  fo.spread_updates = options.device.spread_updates && trains;
  fo.device = &options.device;
  p.groups = fuse ? schedule::fuse(g, fo) : schedule::unfused_groups(g);
  if (fuse) {
    // Narrowing casts into the stores of their operands' kernels, then the remaining casts
    // into their readers' loads, so that a sibling product's matrix is already its stored
    // tensor; again after, for the norms' gamma casts the GEMVs left unread.
    schedule::narrow_stores(g, p.groups, &options.device);
    schedule::absorb_widening_casts(g, p.groups, options.device);
    schedule::fuse_gemv_neighbours(g, p.groups, options.device);
    schedule::absorb_widening_casts(g, p.groups, options.device);
    schedule::fuse_rope_loads(g, p.groups, options.device);
    schedule::read_past_cache_writes(g, p.groups, options.device);
    schedule::fold_permutes_into_rotations(g, p.groups);
    schedule::stack_rotations(g, p.groups);
    schedule::twin_stores(g, p.groups, &options.device);
    schedule::fuse_row_tails(g, p.groups, options.device, fo.max_bindings);
    schedule::fold_permutes_into_stores(g, p.groups, options.device);
    schedule::save_lse_in_forward(g, p.groups, options.device);
    schedule::compute_grad_v_with_grad_k(g, p.groups, options.device);
    schedule::fold_permutes_into_twin_stores(g, p.groups);
    schedule::read_attention_partials(g, p.groups, options.device);
  }
  const std::vector<std::vector<int>> in_place = plan_in_place(g, p.groups);

  p.node_buffer.assign(n, -1);
  auto new_buffer = [&](uint64_t bytes, bool persistent, NodeId node) {
    p.buffers.push_back({bytes, 0, persistent, node});
    return static_cast<int>(p.buffers.size() - 1);
  };
  std::vector<int> first_use, last_use;  // per buffer, in launch indices
  auto touch = [&](int b, int launch) {
    if (static_cast<size_t>(b) >= first_use.size()) {
      first_use.resize(b + 1, -1);
      last_use.resize(b + 1, -1);
    }
    if (first_use[b] < 0) first_use[b] = launch;
    last_use[b] = std::max(last_use[b], launch);
  };

  for (size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    const Node& node = g.node(static_cast<NodeId>(i));
    const std::string_view op = node.op_name();
    if (op == "input" || op == "parameter" || op == "state" || op == "constant") {
      p.node_buffer[i] = new_buffer(device_bytes(node.type), true, static_cast<NodeId>(i));
      touch(p.node_buffer[i], 0);
      if (op == "input") p.inputs.emplace(node.name, static_cast<NodeId>(i));
      if (op == "parameter" || op == "state")
        p.persistents.emplace(node.name, static_cast<NodeId>(i));
    }
  }

  for (size_t gi = 0; gi < p.groups.size(); ++gi) {
    const schedule::KernelGroup& group = p.groups[gi];
    auto buffer_of = [&](NodeId in) {
      const int b = p.node_buffer[in];
      if (b < 0) {
        throw Error("plan: node %" + std::to_string(in) + " is read by kernel '" +
                    schedule::group_name(g, group) + "' before it is computed");
      }
      return b;
    };
    codegen::Lowering l =
        schedule::lower_group(g, group, options.device, in_place[gi], options.check_indices);
    order_by_dependency_level(l);
    if (l.alias_input0) {
      p.node_buffer[group.outputs.at(0)] = buffer_of(group.inputs.at(0));
      continue;
    }
    std::vector<int> outs;
    for (size_t j = 0; j < group.outputs.size(); ++j) {
      // In place: the output is an input's buffer, and its assignment needs no copy.
      const NodeId o = group.outputs[j];
      const int in = in_place[gi].at(j);
      // A kernel may store more than the node's value (Lowering::output_bytes).
      const uint64_t bytes = std::max<uint64_t>(device_bytes(g.node(o).type),
                                                j < l.output_bytes.size() ? l.output_bytes[j] : 0);
      outs.push_back(in >= 0 ? buffer_of(group.inputs.at(static_cast<size_t>(in)))
                             : new_buffer(bytes, false, o));
      p.node_buffer[o] = outs.back();
    }
    std::vector<int> scratch;
    for (uint64_t bytes : l.scratch_bytes) scratch.push_back(new_buffer(bytes, false, -1));
    std::vector<int> counters;
    for (uint64_t bytes : l.counter_bytes) {
      counters.push_back(new_buffer(bytes, true, -1));
      p.zeroed_buffers.push_back(counters.back());
    }
    int slot = -1;  // in the index region, made once every slot is known
    if (l.index_check) {
      slot = static_cast<int>(p.index_checks.size());
      p.index_checks.push_back(
          {group.nodes.front(), static_cast<int>(p.launches.size()), *l.index_check});
    }
    for (codegen::KernelLaunch& k : l.launches) {
      const int index = static_cast<int>(p.launches.size());
      PlannedLaunch launch{
          std::move(k), {}, group.outputs.at(0), group.nodes, static_cast<int>(gi)};
      for (codegen::KernelBinding& b : launch.kernel.bindings) {
        int buf = -1;
        switch (b.arg.kind) {
          case codegen::ArgRef::Kind::input:
            buf = buffer_of(group.inputs.at(b.arg.index));
            break;
          case codegen::ArgRef::Kind::output:
            buf = outs.at(b.arg.index);
            // Outputs past the first are stored beside another kernel's own (matmul epilogues
            // pass them as extra operands).
            if (b.arg.index > 0) b.written = true;
            break;
          case codegen::ArgRef::Kind::scratch:
            buf = scratch.at(b.arg.index);
            break;
          case codegen::ArgRef::Kind::counters:
            buf = counters.at(b.arg.index);
            break;
          case codegen::ArgRef::Kind::index_errors:
            if (slot < 0) {
              throw Error("plan: kernel '" + launch.kernel.name +
                          "' binds an index slot but its lowering has no index check");
            }
            launch.index_slot = slot;
            break;
        }
        launch.buffers.push_back(buf);
        if (buf >= 0) touch(buf, index);
      }
      p.launches.push_back(std::move(launch));
    }
  }

  // The index slots side by side, read by the host after every step (so persistent).
  if (!p.index_checks.empty()) {
    p.index_region.stride = options.alignment;
    p.index_region.buffer = new_buffer(p.index_checks.size() * options.alignment, true, -1);
    for (PlannedLaunch& launch : p.launches) {
      for (size_t k = 0; k < launch.buffers.size(); ++k) {
        if (launch.kernel.bindings[k].arg.kind == codegen::ArgRef::Kind::index_errors)
          launch.buffers[k] = p.index_region.buffer;
      }
    }
  }

  // Launches removed, moved or inserted: their buffers' uses counted again, the index checks'
  // launches followed (a removed one's group goes on with its next launch).
  auto relaunched = [&](const std::vector<int>& moved) {
    for (IndexCheckSlot& c : p.index_checks) {
      size_t j = static_cast<size_t>(c.launch);
      while (moved[j] < 0) ++j;
      c.launch = moved[j];
    }
    first_use.assign(p.buffers.size(), -1);
    last_use.assign(p.buffers.size(), -1);
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (p.buffers[b].persistent && p.buffers[b].node >= 0) touch(static_cast<int>(b), 0);
    }
    for (size_t i = 0; i < p.launches.size(); ++i) {
      for (int b : p.launches[i].buffers) {
        if (b >= 0) touch(b, static_cast<int>(i));
      }
    }
    // A removed launch's scratch is bound by nothing now: it takes no memory.
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (first_use[b] < 0 && !p.buffers[b].persistent) p.buffers[b].bytes = 0;
    }
  };
  if (options.device.shared_launches) {
    SharedLaunchOptions so;
    so.trains = trains;
    const std::vector<int> moved = share_repeated_launches(p.launches, p.buffers, so);
    if (p.launches.size() < moved.size()) relaunched(moved);
  }
  if (fuse) relaunched(hoist_scratch_launches(p.launches, p.buffers));
  if (fuse && fo.spread_updates) relaunched(defer_tail_launches(p.launches, p.groups));

  // Cache prefetches (plan/cache_prefetch.h), for programs that do not train: a training step's
  // windows are long and its weights are written by the step itself.
  if (options.device.cache_prefetch && !trains) {
    std::vector<char> assigned(p.buffers.size(), 0);
    for (const auto& [target, value] : g.assignments()) {
      assigned[static_cast<size_t>(p.node_buffer[target])] = 1;
    }
    CachePrefetchOptions cpo;
    cpo.max_bindings = std::min(cpo.max_bindings, options.device.max_storage_buffers);
    const std::vector<CachePrefetch> prefetches =
        plan_cache_prefetches(p.launches, p.buffers, assigned, cpo);
    if (!prefetches.empty()) {
      const int sink = new_buffer(codegen::kCachePrefetchSinkBytes, true, -1);
      relaunched(insert_cache_prefetches(p.launches, p.buffers, prefetches, sink, options.device));
    }
  }

  const int end = static_cast<int>(p.launches.size());
  for (const auto& [name, id] : g.outputs()) {
    p.outputs.emplace(name, id);
    p.buffers[p.node_buffer[id]].persistent = true;  // read by the host after the step
  }
  for (const auto& [target, value] : g.assignments()) {
    int from = p.node_buffer[value], to = p.node_buffer[target];
    touch(from, end);  // the copies run after every launch
    if (from != to) p.assignment_copies.emplace_back(from, to);
  }

  // A buffer read in a run of launches between two barriers stays live to the run's end: its
  // memory given to a value written later in the same run would be a write-after-read hazard,
  // and a barrier of its own.
  const std::vector<int> run_end = barrier_run_ends(p.launches);
  std::vector<BufferRequest> requests;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    int f = b < first_use.size() ? first_use[b] : 0;
    int l = b < last_use.size() ? last_use[b] : 0;
    if (l >= 0 && l < end) l = run_end[static_cast<size_t>(l)];
    requests.push_back(
        {p.buffers[b].bytes, std::max(f, 0), std::max(l, 0), p.buffers[b].persistent});
  }
  p.memory = plan_memory(requests, options.alignment, options.chunk_bytes);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    p.buffers[b].offset = p.memory.offsets[b];
    p.buffers[b].first_use = requests[b].first_use;
    p.buffers[b].last_use = requests[b].last_use;
  }
  p.arena_bytes = p.memory.arena_bytes;
  p.report.dispatches_after = p.launches.size();
}

// The candidate plans of one step: with and without recomputed activations, each in both orders
// of the gradient kernels. Recomputation is kept where it gives the smallest arena (the first
// planned on ties); between the two orders of that graph, the smaller arena wins unless the other
// is within the device's arena slack (DeviceTraits::plan_arena_slack) and has fewer barrier
// windows (then fewer launches).
struct Candidate {
  StepPlan plan;
  int graph = 0;  // 0: as optimized, 1: with recomputed activations
};

size_t chosen_candidate(const std::vector<Candidate>& c, double slack) {
  size_t smallest = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    if (c[i].plan.arena_bytes < c[smallest].plan.arena_bytes) smallest = i;
  }
  if (slack <= 0.0) return smallest;
  const double limit = static_cast<double>(c[smallest].plan.arena_bytes) * (1.0 + slack);
  using Key = std::tuple<size_t, size_t, uint64_t>;  // windows, launches, arena
  std::vector<Key> keys;
  for (const Candidate& k : c) {
    keys.emplace_back(barrier_windows(k.plan.launches), k.plan.launches.size(), k.plan.arena_bytes);
  }
  size_t best = smallest;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].graph == c[smallest].graph && static_cast<double>(c[i].plan.arena_bytes) <= limit &&
        keys[i] < keys[best]) {
      best = i;
    }
  }
  return best;
}

}  // namespace

StepPlan make_step_plan(const Graph& original, const PlanOptions& given) {
  PlanOptions options = given;
  options.device.bf16_products = given.precision == DType::bf16;
  StepPlan p;
  const bool off = support::env_switch("MN_NO_OPTIMIZE", false);
  optimize::OptimizeOptions oo = options.optimize;
  oo.enabled = oo.enabled && !off;
  std::optional<Graph> mixed;
  if (options.precision != DType::f32) {
    optimize::MixedPrecisionOptions mo;
    mo.attention_operands =
        options.precision == DType::bf16 && codegen::attention_reads_bf16_operands(options.device);
    mixed.emplace(optimize::with_mixed_precision(original, options.precision, mo));
  }
  optimize::OptimizeResult optimized = optimize::optimize(mixed ? *mixed : original, oo);
  p.report = std::move(optimized.report);
  p.graph = schedule::lower_for_gpu(optimized.graph);
  if (options.precision != DType::f32) p.graph = optimize::casts_through_movement(p.graph);
  if (!off) {
    if (std::optional<Graph> g = schedule::share_statistics(p.graph)) p.graph = std::move(*g);
  }
  if (options.fuse && options.reduction_operands && !off) {
    schedule::ReductionOperandOptions ro;
    ro.max_bindings = std::min<uint32_t>(options.device.max_storage_buffers, 256);
    if (std::optional<Graph> g = schedule::private_reduction_operands(p.graph, ro)) {
      p.graph = std::move(*g);
    }
  }
  // Recomputation trades launches for memory: it is kept where it makes the arena smaller
  // (a deep model's activations), not where the backward pass's own working set is the peak
  // and the copies only add to it (a model of two layers). A training step is also planned in
  // both orders of its gradient kernels (schedule::FusionOptions::eager_gradients); the
  // smallest arena wins, the first planned (no copies, graph order) on ties, unless the other
  // order is within the device's arena slack and has fewer barrier windows (chosen_candidate).
  std::vector<Candidate> candidates;
  auto consider = [&](const Graph& graph, const std::vector<char>& copies) {
    const bool training = !graph.assignments().empty();
    for (bool eager : {false, true}) {
      if (eager && !training) break;
      if (training && options.eager_gradients && *options.eager_gradients != eager) continue;
      StepPlan c;
      c.report = p.report;
      c.graph = copy_graph(graph);
      schedule_and_place(c, options, off, copies, eager);
      candidates.push_back({std::move(c), copies.empty() ? 0 : 1});
    }
  };
  consider(p.graph, {});
  if (options.rematerialize && !off) {
    if (std::optional<schedule::Rematerialized> r = schedule::rematerialize(p.graph)) {
      consider(r->graph, r->copies);
    }
  }
  return std::move(candidates[chosen_candidate(candidates, options.device.plan_arena_slack)].plan);
}

}  // namespace mn::plan
