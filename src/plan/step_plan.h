#pragma once
// The plan of one step: the GPU-lowered graph, its kernels in dispatch order with the buffer of
// every binding, the buffers' placement in one arena, and the copies that apply assignments.
// Pure data, no Vulkan: the runtime turns it into pipelines and one recorded command buffer.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "optimize/optimize.h"
#include "plan/memory_plan.h"
#include "schedule/fusion.h"

namespace mn::plan {

struct PlannedBuffer {
  uint64_t bytes = 0;
  uint64_t offset = 0;  // in the arena
  bool persistent = false;
  NodeId node = -1;                 // the node whose value it holds; -1 for scratch
  int first_use = 0, last_use = 0;  // launch indices (launches.size() = after the last launch)
};

struct PlannedLaunch {
  codegen::KernelLaunch kernel;
  // Per binding: index into StepPlan::buffers (for ArgRef::index_errors, the index region,
  // of which the binding is slot `index_slot` alone).
  std::vector<int> buffers;
  NodeId node = -1;           // the first value it writes
  std::vector<NodeId> nodes;  // every node its kernel group computes (fusion)
  int group = -1;             // index into StepPlan::groups
  int index_slot = -1;
};

// A node whose kernels check their indices (codegen/index_check.h): slot i of the plan's index
// region is StepPlan::index_checks[i], in dispatch order.
struct IndexCheckSlot {
  NodeId node = -1;
  int launch = 0;  // its first launch
  codegen::IndexCheck check;
};

// The index slots of a plan, side by side in one persistent buffer, so that the host reads them
// all at once after a step: slot i at byte i * stride of buffer `buffer` (stride: the binding
// alignment, so each kernel binds its own slot alone).
struct IndexRegion {
  int buffer = -1;  // -1: no node checks indices
  uint64_t stride = 0;
  uint64_t slot_offset(const std::vector<PlannedBuffer>& buffers, int slot) const {
    return buffers[static_cast<size_t>(buffer)].offset + static_cast<uint64_t>(slot) * stride;
  }
};

struct StepPlan {
  Graph graph;  // optimized, then lowered for the GPU; node ids below refer to it
  optimize::OptimizeReport report;  // dispatches_after filled here; dispatches_before is not
  std::vector<PlannedBuffer> buffers;
  std::vector<int> node_buffer;         // per node of `graph`: its buffer, or -1 when not computed
  std::vector<PlannedLaunch> launches;  // launches.size() = dispatches
  // The kernel groups in dispatch order (schedule/fusion.h): the nodes each kernel covers.
  std::vector<schedule::KernelGroup> groups;
  std::vector<std::pair<int, int>> assignment_copies;  // (from value buffer, to target buffer)
  std::vector<IndexCheckSlot> index_checks;            // in dispatch order
  IndexRegion index_region;
  // Persistent buffers the session zeroes once, before the first step (Lowering::counter_bytes).
  std::vector<int> zeroed_buffers;
  std::map<std::string, NodeId, std::less<>> inputs, persistents, outputs;
  MemoryPlan memory;
  uint64_t arena_bytes = 0;
};

struct PlanOptions {
  codegen::DeviceTraits device;
  uint64_t alignment = 256;  // binding offset alignment
  uint64_t chunk_bytes = 0;  // largest binding (arena chunk); 0: unlimited
  // Kernel fusion (schedule/fusion.h); the environment variable MN_FUSION=0 also turns it off,
  // to tell a fusion problem from others.
  bool fuse = true;
  // E-graph optimization (optimize/optimize.h) before lowering; MN_NO_OPTIMIZE=1 turns both it
  // and fusion off.
  optimize::OptimizeOptions optimize;
  // Kernels reading indices record out-of-range ones (codegen/index_check.h).
  bool check_indices = true;
  // Products in 16 bits (optimize/mixed_precision.h): f32 (off), bf16 or f16.
  DType precision = DType::f32;
  // Cheap forward values the backward pass reads are computed again there instead of kept
  // (schedule/rematerialize.h).
  bool rematerialize = true;
  // Reductions compute the pointwise values they read in their own loads where other kernels
  // read those values too (schedule/reduction_operands.h), with fusion on.
  bool reduction_operands = true;
  // The order of a training step's gradient kernels (schedule::FusionOptions::eager_gradients):
  // unset plans both and keeps the smaller arena.
  std::optional<bool> eager_gradients;
};

StepPlan make_step_plan(const Graph& g, const PlanOptions& options);

// Bytes a tensor of this type occupies in device memory.
uint64_t device_bytes(const TensorType& t);

}  // namespace mn::plan
