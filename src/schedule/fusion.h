#pragma once
// Kernel fusion: which nodes of the GPU-lowered graph run together in one kernel.
//
// The result is a list of KernelGroups in dispatch order. A group is a set of nodes that
// becomes one lowering (one kernel, or the launches of one op's lowering), with its external
// inputs (node ids, binding ArgRef::input(i)) and its outputs (the nodes whose values are
// needed outside it: read by another group, graph outputs, assigned values; ArgRef::output(j)).
// Values inside a group live in registers only.
//
// Kinds:
//  - single: one node and its op's own lowering (everything without a fused form; views that
//    alias their input stay single and launch nothing).
//  - pointwise: a DAG of f32 pointwise ops evaluated per element of one domain shape. Built
//    greedily in reverse topological order: a producer joins its consumers' group when every
//    consumer is in it (it may then have a smaller shape, read through broadcasting like an
//    operand: recomputed per element, but only within that one group, so the work stays
//    bounded by the group's size), or when it has the domain's shape and the join creates no
//    cycle between groups: it then becomes one more output of the kernel (multi-output) instead
//    of being recomputed by each consumer. Before that, the pointwise groups of a value's
//    consumers over its shape merge (sibling fusion) unless another group lies between them.
//  - pointwise, several segments (horizontal fusion): independent pointwise groups at the end
//    of the step — the optimizer update of every parameter, whose values only feed assignments,
//    outputs and other such groups — merge into one launch per level over concatenated index
//    ranges, as far as the device's binding limit allows. With spread_updates they launch
//    where they become ready instead, the updates ready together in one launch.
//    Small pointwise groups reading only sources (bias corrections of the step count, rotary
//    tables) likewise share one launch, at the start of the step.
//  - matmul_epilogue: a matmul (not itself needed outside) all of whose consumers are in one
//    single-segment pointwise group over the matmul's output shape (bias, activation, residual
//    or gradient-accumulation add, scaling, a whole optimizer update): the group is evaluated
//    in the matmul's store (codegen/matmul_epilogue.h); its first output leaves through the
//    matmul's own store, the others are stored by the epilogue at the same element.
//    A conv2d forward takes an epilogue the same way (bias [C,1,1], activation, residual add
//    over its output's shape; the epilogue sees the conv as the product [N, O, OH·OW], see
//    codegen/matmul_epilogue.h), and its own value may be needed outside the group too (the
//    relu gradient's mask reads it): it is then one more output, stored by the epilogue.
//  - reduction: a sum/mean/max/min/sum_to with a prologue, the pointwise group computing its
//    operand when that operand is the group's only output and read by nothing else (sum(x * x):
//    evaluated in the reduction's loads, never stored), and/or an epilogue, the single-output
//    pointwise group over the reduced shape holding every consumer of the reduction
//    (rsqrt(mean + eps): evaluated before the store; one ending in a narrowing cast stores the
//    16-bit value). See codegen/fused_reduce.h.
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"

namespace mn::schedule {

struct FusionOptions {
  bool pointwise = true;        // vertical fusion of pointwise DAGs
  bool siblings = true;         // pointwise groups reading one value merge
  bool horizontal = true;       // independent end-of-step pointwise groups in one launch
  bool matmul_epilogue = true;  // pointwise consumers into the matmul's store
  bool conv_epilogue = true;    // pointwise consumers into the conv2d forward's store
  bool reduction = true;        // pointwise producers and consumers into a reduction
  uint32_t max_bindings = 32;   // storage buffers one kernel may bind
  // Per node (empty: none): a value computed again for the backward pass
  // (schedule/rematerialize.h). Its kernel never shares a launch with forward nodes, and does
  // not launch before the dispatch order reaches its place in the graph, so that it is computed
  // where the backward pass needs it, not as soon as its inputs are ready.
  std::vector<char> deferred;
  // Deferred kernels are also launched as soon as launching them frees more memory than they
  // store (the last reader of an activation). With this set, a kernel whose values only the
  // optimizer's updates read (a parameter's gradient) launches as soon as it is ready, too,
  // and does not move the order's position. Which order gives the smaller arena depends on the
  // model (ResNet's gradients are smaller than the activations they read, a small batch's
  // transformer gradients larger): plan/step_plan.cpp plans both.
  bool eager_gradients = false;
  // The optimizer's updates (the tail groups) launch where they become ready instead of all at
  // the end of the step: consecutive ready updates share one launch, and each runs beside the
  // backward kernels of the next level, which at small batches leave the memory bus idle; a
  // gradient's buffer is free once its update has run.
  bool spread_updates = false;
  // The device the kernels are for: its readers that load a widened 16-bit operand themselves
  // only on some devices (codegen::reads_widened_operand: attention's tensor-addressed kernels)
  // then count as reading it widened too. nullptr: only codegen::always_reads_widened's.
  const codegen::DeviceTraits* device = nullptr;
};

struct KernelSegment {
  Shape domain;
  std::vector<NodeId> nodes;    // topological order
  std::vector<NodeId> outputs;  // of this segment, each of `domain`'s shape
};

struct KernelGroup {
  enum class Kind : uint8_t { single, pointwise, matmul_epilogue, reduction };
  Kind kind = Kind::single;
  // Topological order (matmul_epilogue puts the matmul first).
  std::vector<NodeId> nodes;
  std::vector<NodeId> inputs;   // ArgRef::input(i); single: the node's operands as they are
  std::vector<NodeId> outputs;  // ArgRef::output(j)
  // pointwise: one per index range; matmul_epilogue: the epilogue; reduction: the prologue
  // (domain: the operand's shape) and the epilogue (the reduced shape), either maybe empty.
  std::vector<KernelSegment> segments;
  NodeId anchor = -1;  // matmul_epilogue: the matmul or conv2d; reduction: the reduction
  // End-of-step work: a pointwise group whose values feed only assignments, outputs and other
  // such groups (the optimizer's updates; fuse sets it): nothing of the step waits for it.
  bool tail = false;
  // Matrix-vector products (single or matmul_epilogue) only, see schedule/gemv_fusion.h.
  struct Gemv {
    // The rms_norm node the vector is read through: input 0 is then the norm's x, and its
    // gamma (when it has one) input `gamma_input`.
    NodeId norm = -1;
    int gamma_input = -1;
    // A second matmul of the same vector and matrix shape, computed beside this one: its
    // matrix is input `sibling_input`, its value the epilogue's operand `sibling`.
    NodeId sibling = -1;
    int sibling_input = -1;
    // Further products of the same vector stored beside this one (codegen::GemvExtras::stacked):
    // the matmul stacked[j] is output j + 1, its matrix input stacked_input[j].
    std::vector<NodeId> stacked;
    std::vector<int> stacked_input;
    // A second product of this one's stored value, computed in the same kernel
    // (codegen::GemvExtras::chain): the matmul `then` and, when set, the add of a residual
    // (`then_add`, the group's output 1; else `then` is), D as input `then_input`, the
    // residual as input `then_residual`.
    NodeId then = -1, then_add = -1;
    int then_input = -1, then_residual = -1;
    // Input 0 holds a decoding attention's partials, `combine_splits` key ranges of
    // `combine_dv` values per head, which the kernel combines into its vector
    // (schedule/attention_partials.h, codegen::GemvExtras::combine); 0: none.
    int64_t combine_splits = 0, combine_dv = 0;
  };
  Gemv gemv;
  // Single cache_write and cached_attention groups only, see schedule/rope_fusion.h: the
  // rope_positions node whose rotation the kernel applies as it loads input `operand` (which
  // then holds the rope's x); the rope's positions are input `positions_input`.
  struct Rope {
    NodeId node = -1;
    int operand = -1;
    int positions_input = -1;
  };
  Rope rope;
  // Single cached_attention groups only, see schedule/cache_append.h: inputs 1 and 2 hold the
  // key and value caches as they were before this step's cache_writes, and the kernel reads the
  // slot each write stores (one position per cache row) from the write's update instead:
  // inputs `k_update` and `v_update`, at the positions in input `positions`. The key update may
  // be rotated as it is loaded, as by the cache_write's own rope (`k_rope`, its positions
  // input `k_rope_positions`).
  struct CacheAppend {
    NodeId k_write = -1, v_write = -1;  // the cache_write nodes
    int k_update = -1, v_update = -1, positions = -1;
    NodeId k_rope = -1;
    int k_rope_positions = -1;
  };
  CacheAppend append;
  // Single rope_positions(_backward) groups only, see schedule/permuted_rotations.h: the
  // permutation through which the kernel reads its operand (input 0 then holds the permute's
  // operand) and the one through which it stores its result (its output is then the permute's
  // value); empty: none.
  std::vector<int64_t> load_perm, store_perm;
  // Single rope_positions(_backward) groups only, see schedule/stacked_rotations.h: a second
  // rotation by the same positions in the same kernel: the node, its operand's input index, the
  // permutations it loads and stores through; its value is output 1. node -1: none.
  struct StackedRotation {
    NodeId node = -1;
    int input = -1;
    std::vector<int64_t> load_perm, store_perm;
  };
  StackedRotation stacked_rotation;
  // Single cached_attention groups only, see schedule/attention_partials.h: the kernel stores its
  // key ranges' partials as its output (codegen::LowerContext::attention_partials), which the
  // one product reading it combines.
  bool attention_partials = false;
  // Single scaled_dot_product_attention groups only, see schedule/saved_lse.h: output 1 is the
  // attention_lse of the same operands, which the forward kernel stores as it finishes a row.
  bool saves_lse = false;
  // Single attention_grad_k groups only, see schedule/grad_kv.h: output 1 is the
  // attention_grad_v of the same operands, which the kernel accumulates beside dK.
  bool computes_grad_v = false;
  // Other single groups and reduction groups, see schedule/permuted_stores.h: the result is
  // stored as permute(result, stored_permuted) (codegen::add_permuted_store), and the group's
  // output is the permute's value; empty: as it is.
  std::vector<int64_t> stored_permuted;
  // Single groups storing only through their output's generic store, see
  // schedule/permuted_stores.h: output `output` is the permute (by `perm`, maybe narrowing) of
  // output 0, which other kernels read as it is; the kernel stores both
  // (codegen::add_permuted_twin_store). output -1: none.
  struct PermutedTwin {
    int output = -1;
    std::vector<int64_t> perm;
  };
  PermutedTwin permuted_twin;
};

// `small` broadcasts to exactly `big` (right-aligned, size-1 or equal extents).
bool broadcasts_to(const Shape& small, const Shape& big);

// Per node, the needed nodes reading it, each once, in graph order.
std::vector<std::vector<NodeId>> needed_consumers(const Graph& g, const std::vector<char>& needed);

// Per value, how many of `groups` bind it (each group once).
std::map<NodeId, int> group_readers(std::span<const KernelGroup> groups);

// Per value, the index among `groups` of the group storing it (one of its outputs).
std::map<NodeId, int> group_producers(std::span<const KernelGroup> groups);

// Whether the group's kernel is its lowering's alone: nothing computed beside the product of a
// GEMV (norm, sibling, stacked products), no rotation applied as an operand loads, no cache
// slot read from a write's update.
bool without_extras(const KernelGroup& k);
// The same but for a norm a product takes of its rows (KernelGroup::Gemv::norm).
bool without_extras_but_a_norm(const KernelGroup& k);

// The types of node `n`'s inputs, as a lowering context of the node takes them.
std::vector<TensorType> node_input_types(const Graph& g, const Node& n);

// The values a step returns or assigns: stored as they are, whatever reads them.
std::set<NodeId> kept_values(const Graph& g);

// Whether every one of `readers` loads `value` through a widening loader wherever it reads it
// (codegen::always_reads_widened; with a device, codegen::reads_widened_operand too): a 16-bit
// tensor would do for all of them.
bool read_widened_by_all(const Graph& g, NodeId value, std::span<const NodeId> readers,
                         const codegen::DeviceTraits* device = nullptr);

// A pointwise node that fusion puts in pointwise kernels (codegen::fusable_pointwise), not a
// widening cast of a stored 16-bit tensor (read widened by its readers, widened_loads.h).
bool fusable_node(const Graph& g, NodeId id);

// An f32 constant of one element: fused kernels take its value as a literal, not a binding.
bool is_scalar_constant(const Node& node);

// Nodes whose values a step computes: those the outputs and assignments depend on (the same
// set the step plan allocates and runs).
std::vector<char> needed_nodes(const Graph& g);
// Nodes the graph's outputs depend on: a training step's forward pass (the rest of what it
// computes, gradients and updates, only its assignments need).
std::vector<char> forward_nodes(const Graph& g);

// The kernel groups of `lowered` (a graph after lower_for_gpu) in a valid dispatch order,
// covering every needed node that is not a source (input, parameter, state, constant) once.
std::vector<KernelGroup> fuse(const Graph& lowered, const FusionOptions& options);

// Drops the single groups of nodes `droppable` accepts that no group, output or assignment reads
// any more (after later passes rewired their readers); the order of the others is kept. A
// GEMV's sibling stays listed among the inputs of the epilogue reading it, but is computed there.
void drop_unread_groups(const Graph& g, std::vector<KernelGroup>& groups,
                        const std::function<bool(NodeId)>& droppable);

// One single group per needed non-source node, in graph order (fusion off).
std::vector<KernelGroup> unfused_groups(const Graph& lowered);

// The kernels of a group, its ArgRefs relative to the group's inputs and outputs.
// in_place: per output, the input whose buffer it is written into, or -1 (plan/in_place.h);
// empty: none. check_indices: LowerContext::check_indices.
codegen::Lowering lower_group(const Graph& g, const KernelGroup& group,
                              const codegen::DeviceTraits& device,
                              std::span<const int> in_place = {}, bool check_indices = true);

// "fused_pointwise[add,mul,relu]", "optimizer_update[12 segments]"... for profiles.
std::string group_name(const Graph& g, const KernelGroup& group);

}  // namespace mn::schedule
