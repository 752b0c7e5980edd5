#pragma once
// What a node lowers to: GLSL compute kernels with their bindings and grid, independent of
// Vulkan objects (the runtime turns them into pipelines and dispatches).
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

namespace mn::codegen {

// Device facts the emitters choose tile sizes and features by.
struct DeviceTraits {
  uint32_t subgroup_size = 32;
  bool subgroup_add = false;  // subgroupAdd in compute shaders (GL_KHR_shader_subgroup_arithmetic)
  bool subgroup_vote = false;  // subgroupAny/AllEqual in compute shaders (..._subgroup_vote)
  bool subgroup_shuffle = false;  // subgroupShuffleXor in compute shaders (..._subgroup_shuffle)
  // The sizes a compute subgroup may have (they differ where the driver chooses per pipeline):
  // a kernel whose lanes exchange values within groups of n needs n <= min_subgroup_size and
  // workgroups of a multiple of max_subgroup_size (full subgroups).
  uint32_t min_subgroup_size = 32, max_subgroup_size = 32;
  uint32_t max_workgroup_invocations = 256;
  uint32_t max_shared_bytes = 16384;
  uint32_t max_group_count = 65535;   // per grid dimension
  bool storage_16bit = false;         // f16/bf16 tensors need 16-bit storage access
  bool float_atomics = false;         // atomicAdd on float in storage buffers
  uint32_t max_storage_buffers = 32;  // storage buffers one kernel may bind (per stage)
  // Cooperative matrices (tensor cores), set by the runtime (src/runtime/coop_support.h):
  // f16×f16→f32 16×16×16 subgroup matrices usable through GL_NV_cooperative_matrix, their
  // self-test passed, and MN_DISABLE_COOP unset.
  bool coop = false;
  bool coop_khr = false;  // compile coop kernels through the SPV_KHR rewrite
  // bf16×bf16→f32 16×16×16 subgroup matrices (VK_KHR_cooperative_matrix with
  // VK_KHR_shader_bfloat16's matrices) and the current glslang to compile them: attention's
  // training kernels on tensor cores (codegen/lower_attention_training_coop.h). Used with coop.
  bool coop_bf16 = false;
  // The step's products are bf16 (plan::PlanOptions::precision, mixed precision): attention's
  // training ops then take those kernels on f32 operands too, rounding them to bf16 as they
  // load them, as autocast runs attention on bf16 operands.
  bool bf16_products = false;
  // Bit i: subgroup tile i (coop_tiles()) may be used; bit kCoopWgTileBit + i: workgroup tile i
  // (coop_wg_tiles()).
  uint32_t coop_tiles = ~0u;
  uint32_t max_shared_optin_bytes = 0;  // largest shared memory a kernel may ask for
  // Workgroup-scope f16·f16+f32 matrices (VK_NV_cooperative_matrix2): the M, N and K
  // granularities for workgroups of 32·2^i invocations at index i (zeros: not offered), and
  // the largest dimension.
  std::array<std::array<uint32_t, 3>, 4> coop_wg_granularity{};
  uint32_t coop_wg_max_dimension = 0;
  // Tensor-addressed loads and stores and per-element operations on those matrices, and the
  // current glslang to compile them (codegen/lower_matmul_tensor.h); MN_COOP_TENSOR=0 clears it.
  bool coop_tensor = false;
  // Conversions of those matrices between uses and component types (cooperativeMatrixConversions):
  // an f32 accumulator becomes a bf16 A- or B-matrix in place.
  bool coop_tensor_conversions = false;
  // Row and column reductions of those matrices (cooperativeMatrixReductions): a softmax's row
  // maxima and sums on the accumulators.
  bool coop_tensor_reductions = false;
  // Attention's forward and gradient ops on those matrices, the softmax on the accumulators
  // (codegen/lower_attention_tensor.h, lower_attention_training_tensor.h). Sessions set it
  // (runtime::apply_environment) unless MN_TENSOR_ATTENTION=0.
  bool tensor_attention = false;
  // A training step's plan: of the two orders of its gradient kernels, the one of fewer barrier
  // windows where its arena is within this fraction of the smallest (plan/step_plan.cpp; 0: the
  // smallest arena; recomputation is kept where it gives the smallest arena either way). The
  // gradient kernels' two orders can differ by a few percent of arena and by a sixth of the
  // windows (SmolLM2's 1 x 256 bf16 step: 2138 MiB in 643 windows, 2208 in 553, the second
  // 5 % faster on an H100, docs/perf.md). MN_PLAN_ARENA_SLACK (a percentage) sets it
  // (runtime::apply_environment).
  double plan_arena_slack = 0.10;
  // A bf16 training step's attention reads its q, k, v and dout rounded to bf16 where the
  // tensor-addressed kernels serve it (codegen::attention_reads_bf16_operands). Sessions keep it
  // unless MN_BF16_ATTENTION_OPERANDS=0 (runtime::apply_environment).
  bool bf16_attention_operands = true;
  // A prompt's cached_attention at positions on the same forward kernel. Sessions set it
  // (runtime::apply_environment) unless MN_TENSOR_PROMPT_ATTENTION=0 (measured: docs/perf.md).
  bool tensor_prompt_attention = false;
  // MN_TENSOR_ATTENTION_TILE and MN_TENSOR_ATTENTION_GRAD_TILE: the forward's and the gradient
  // kernels' tiles (codegen/attention_tensor_tiles.h); empty: the default.
  std::string tensor_attention_tile, tensor_attention_grad_tile;
  // Attention's tensor-addressed forward and gradient kernels on grids too small for the device
  // share each tile's blocks among workgroups, aiming at this many fills of the device
  // (codegen/attention_tensor_tiles.h, split_tile_blocks); MN_TENSOR_ATTENTION_FILLS and
  // MN_TENSOR_ATTENTION_GRAD_FILLS set them, 0 never splits.
  uint32_t tensor_attention_fills = 4, tensor_attention_grad_fills = 4;
  // Those kernels, where a tile's blocks are not split (and not over a prompt at positions, not
  // yet measured), issue each block's loads at its start
  // (the values' block before the scores; the gradients' three other operands before P), so
  // their latencies overlap the block's products and softmax instead of each waiting in turn.
  // Measured on an H100 (docs/perf.md): unsplit kernels faster (dQ at L 8192 -15 %), split ones
  // slower (L 512 +12 %), hence only unsplit. MN_TENSOR_ATTENTION_EARLY_LOADS=0 turns it off
  // (runtime::apply_environment).
  bool tensor_attention_early_loads = true;
  std::string coop_tensor_tile;  // MN_COOP_TENSOR_TILE: force this tile where it fits
  // MN_COOP_TENSOR_SPLIT_K: K splits of tensor-addressed matmuls whose tiles do not fill the
  // device; 0 chooses (codegen/lower_matmul_tensor.h), 1 never splits, n forces n where K allows.
  int coop_tensor_split_k = 0;
  // Grids that fill the device but walk a long K loop are split too
  // (codegen/lower_matmul_tensor.cpp). Sessions set it (runtime::apply_environment) unless
  // MN_COOP_TENSOR_LONG_SPLIT=0 (measured: docs/perf.md).
  bool coop_tensor_long_split = false;
  // The tensor-addressed matmul computes a sibling product beside its own (a prompt's gate and
  // up projections, schedule/gemv_fusion.h). Sessions set it (runtime::apply_environment) unless
  // MN_TENSOR_SIBLING=0 (measured: docs/perf.md).
  bool tensor_sibling = false;
  // Products on the scalar tiled kernel take a sibling product (tiled_sibling: a prompt's or a
  // denoising step's gate and up as one kernel) and the norm of their rows (tiled_norm)
  // (codegen::tiled_takes_extras, schedule/gemv_fusion.h). Sessions take the sibling unless
  // MN_TILED_SIBLING=0 and the norm only with MN_TILED_NORM=1: its squares in the product loop
  // cost more than its launch and barrier (H100, docs/perf.md). runtime::apply_environment.
  bool tiled_norm = false;
  bool tiled_sibling = true;
  // A decoding MLP's down projection computed in the gate·up GEMV's kernel (GemvExtras::chain,
  // schedule/gemv_fusion.h): one barrier window fewer a layer, but its 48 large workgroups
  // were slower than the two kernels on the H100 (docs/perf.md). Off unless MN_GEMV_CHAIN=1
  // (runtime::apply_environment).
  bool gemv_chain = false;
  // Keys a block of the decode attention's stream kernel takes (codegen/lower_attention.cpp):
  // 0 takes its default; MN_ATTENTION_DECODE_KEYS (a power of two from 16 to 1024) sets it.
  uint32_t decode_attention_keys = 0;
  // A decoding step's heads over one key/value head scored by one workgroup of the decode
  // attention, each key and value read once for them (codegen/lower_attention.cpp). Off unless
  // MN_ATTENTION_DECODE_GROUPS=1 (runtime::apply_environment): on the H100 it took a batch of 8
  // over 4096 cached keys from 148 to 108 µs but was slower at shorter contexts and at batch 1
  // (fewer workgroups pulling the same bytes, docs/perf.md).
  bool decode_attention_groups = false;
  // A decoding attention's key ranges combined by the product that reads its output (the output
  // projection) as it loads its vector, instead of by the attention's last workgroup of each row
  // after a count across workgroups (schedule/attention_partials.h). Sessions set it
  // (runtime::apply_environment) unless MN_ATTENTION_PARTIALS_IN_PRODUCTS=0.
  bool attention_partials_in_products = false;
  // Keys each lane of a stream takes per block: 0 takes 8 quads of keys and of values a lane;
  // MN_ATTENTION_DECODE_LANE_KEYS (1, 2, 4, 8 or 16) sets it, up to 16 quads a lane.
  uint32_t decode_attention_lane_keys = 0;
  // Attention over prompts on the subgroup-scope matrices (codegen/lower_attention_coop.cpp):
  // MN_COOP_ATTENTION unset lets the lowering choose (codegen/lower_attention.cpp), =1 takes
  // the kernel wherever it fits, =0 keeps the f32 kernels.
  enum class Choice : uint8_t { automatic, always, never };
  Choice coop_attention = Choice::automatic;
  // MN_MATMUL_SPLIT_K: K splits of the tiled (scalar) matmul; 0 chooses (long K over few
  // tiles, codegen/lower_matmul.cpp), 1 never splits, n forces n where K allows.
  int matmul_split_k = 0;
  // Switches of the tensor-core kernels for measurements and comparisons, read once from the
  // environment with the others (runtime::apply_environment), each checked there:
  std::string coop_subgroup_tile;  // MN_COOP_TILE: force this subgroup-scope tile where it fits
  std::string coop_wg_tile;        // MN_COOP_WG_TILE: force this workgroup-scope tile
  bool coop_single_stage = false;  // MN_COOP_STAGES=1: subgroup tiles stage operands once
  bool coop_prepack = true;  // MN_COOP_PREPACK=0: f32 operands staged, not packed (CoopOptions)
  bool coop_wg = true;       // MN_COOP_WG=0: no workgroup-scope matmul kernel
  bool conv_coop = true;     // MN_CONV_COOP=0: convolutions' implicit GEMMs stay f32
  // MN_CONV_NO_MATMUL=1 clears it: 1×1 convolutions keep the implicit GEMM instead of the
  // matmul kernels (codegen/lower_conv_matmul.h).
  bool conv_matmul = true;
  // MN_CONV_COOP_1X1=1: on tensor-core devices 1×1 convolutions are routed to the subgroup
  // matmul kernel all the same (measured slower than the implicit GEMM there).
  bool conv_coop_1x1 = false;
  // MN_CONV_STAGED=1: convolutions' implicit GEMMs on the subgroup tiles with operands staged
  // through shared memory (codegen/lower_conv_gemm_staged.h) instead of packed copies or f32
  // kernels. Off by default until measured against them on a device.
  bool conv_staged = false;
  // Attention's bf16 training kernels on tensor cores take the values they compute on the way as
  // second outputs (schedule/grad_kv.h: dK's kernel stores dV; schedule/saved_lse.h: the
  // tensor-core forward stores the log-sum-exp). Sessions set it (runtime::apply_environment)
  // unless MN_FUSED_ATTENTION_OUTPUTS=0.
  bool fused_attention_outputs = false;
  // The granularities of workgroup-scope bf16·bf16+f32 matrices, as coop_wg_granularity's
  // (zeros: not offered; VK_KHR_shader_bfloat16's cooperative matrices are needed too).
  std::array<std::array<uint32_t, 3>, 4> coop_wg_bf16_granularity{};
  // A kernel at the end of each barrier window reads the weights the next window's kernels read,
  // so that they find them in the GPU's cache (plan/cache_prefetch.h). Set for discrete GPUs
  // (runtime::device_traits), whose memory latency a decoding step's short windows wait on;
  // MN_CACHE_PREFETCH=0|1 overrides (runtime::apply_environment).
  bool cache_prefetch = false;
  // A launch repeating an earlier one of its program (an f32 weight packed for tensor cores in
  // every step of a loop) runs once (plan/shared_launches.h); MN_SHARED_LAUNCHES=0 turns it off.
  bool shared_launches = true;
  // A training step's optimizer updates launch as their gradients become ready, beside the
  // backward pass, instead of all at its end (schedule::FusionOptions::spread_updates);
  // MN_SPREAD_UPDATES=0|1 overrides.
  bool spread_updates = false;
  uint32_t multiprocessors = 0;  // 0: unknown
  // Workgroups that give every multiprocessor one (a large GPU's count when unknown): the grid
  // size below which tile choices prefer smaller tiles or split K.
  int64_t groups_to_fill() const { return multiprocessors ? multiprocessors : 128; }
};

// A kernel operand: input i of the node, its output, scratch buffer i of the lowering, or the
// node's index-error slot (codegen/index_check.h). Fused kernels (src/schedule/fusion.h) read
// input i of their group and write output i.
struct ArgRef {
  enum class Kind : uint8_t { input, output, scratch, index_errors, counters };
  Kind kind = Kind::input;
  int index = 0;
  static ArgRef input(int i) { return {Kind::input, i}; }
  static ArgRef output(int i = 0) { return {Kind::output, i}; }
  static ArgRef scratch(int i) { return {Kind::scratch, i}; }
  static ArgRef index_errors() { return {Kind::index_errors, 0}; }
  static ArgRef counters(int i) { return {Kind::counters, i}; }
  bool operator==(const ArgRef&) const = default;
};

struct KernelBinding {
  ArgRef arg;
  bool written = false;
};

struct KernelLaunch {
  std::string name;  // for profiles and errors, e.g. "add" or "matmul_64x64"
  std::string glsl;  // complete shader; workgroup size through local_size_{x,y,z}_id 0..2
  std::array<uint32_t, 3> workgroup{64, 1, 1};
  std::array<uint32_t, 3> groups{1, 1, 1};
  std::vector<KernelBinding> bindings;  // descriptor binding i = bindings[i]
  // Compile through the SPV_KHR_cooperative_matrix rewrite whatever the device's path:
  // workgroup-scope matrices exist only as KHR types.
  bool coop_khr = false;
  // Compile with the current glslang (shader/current_glslang.h): the kernel uses
  // GL_NV_cooperative_matrix2's tensor addressing, which the linked glslang 12 cannot compile.
  bool current_compiler = false;
};

// What a node's index check compares: values of node input `input` must lie in [0, bound).
// The words name them in the error: "<noun> 7 at element 3 of the <operand> is out of range
// [0, 5)<context>", as the reference's messages do.
struct IndexCheck {
  int input = 1;
  int64_t bound = 0;
  std::string noun = "index";       // "target value", "position"
  std::string operand = "indices";  // "target", "positions"
  std::string context;              // " along axis 0 of shape [5, 3]"
};

struct Lowering {
  std::vector<KernelLaunch> launches;  // run in order
  std::vector<uint64_t> scratch_bytes;
  // Words the kernels count in across workgroups (ArgRef::counters(i)), e.g. to let the last
  // workgroup of a split finish the work: zero before the first step and kept between steps,
  // so each step's kernels must leave them zero again.
  std::vector<uint64_t> counter_bytes;
  // Set when a launch binds ArgRef::index_errors(): what its index check compares.
  std::optional<IndexCheck> index_check;
  // The output is input 0's memory reinterpreted (reshape of contiguous data): no launch.
  bool alias_input0 = false;
  // Per output, bytes its buffer holds at least, where the kernel stores more than the node's
  // value (a decoding attention's partials, LowerContext::attention_partials); empty or 0: the
  // node's type.
  std::vector<uint64_t> output_bytes;
};

// A second rotation a rotation's kernel computes beside its own (same positions, frequencies and
// head size): its operand is the group's input `input`, of the rotation's shape `shape` (or
// stored permuted, x = permute(input, *load_perm)); its result is ArgRef::output(1), of dtype
// `out_dtype` (or stored as permute(result, *store_perm)).
struct StackedRotation {
  int input = -1;
  Shape shape;
  const std::vector<int64_t>* load_perm = nullptr;
  const std::vector<int64_t>* store_perm = nullptr;
  DType out_dtype = DType::f32;
};

struct RopeLoad;         // codegen/rope_load.h
struct CacheAppendLoad;  // codegen/lower_attention.h

struct LowerContext {
  const Node& node;
  std::span<const TensorType> inputs;
  const DeviceTraits& device;
  // Ops with OpDef::updates_input0_in_place: the output binding is input 0's own buffer, so
  // only the changed elements are stored (the planner decided no one reads the old value).
  bool in_place = false;
  // Kernels reading indices record the first out-of-range one (codegen/index_check.h); off,
  // they still read zero for it or skip it, silently.
  bool check_indices = true;
  // A rope_positions applied to one operand as the kernel loads it (codegen/rope_load.h): the
  // operand then holds the rope's x, and the positions are one more input.
  const RopeLoad* rope = nullptr;
  // cached_attention only: the slots this step's cache_writes store, read from their updates
  // while the caches are read as they were (schedule/cache_append.h).
  const CacheAppendLoad* append = nullptr;
  // rope_positions and rope_positions_backward only (schedule/permuted_rotations.h): operand 0
  // is stored permuted, x = permute(input 0, *load_perm), and/or the result is stored permuted,
  // out = permute(result, *store_perm); null: as the node's shapes say. Both keep the last axis.
  const std::vector<int64_t>* load_perm = nullptr;
  const std::vector<int64_t>* store_perm = nullptr;
  // rope_positions and rope_positions_backward only (schedule/stacked_rotations.h): a second
  // rotation by the same positions and frequencies in the same launch; null: none.
  const StackedRotation* stacked_rotation = nullptr;
  // scaled_dot_product_attention only (schedule/saved_lse.h): each query row's log-sum-exp of
  // its scores (attention_lse's value) is stored too, as output 1 of this dtype; nullopt: not.
  std::optional<DType> saved_lse;
  // attention_grad_k only (schedule/grad_kv.h): the attention_grad_v of the same operands is
  // computed too, from the same recomputed probabilities, and stored as output 1 of this dtype;
  // nullopt: not.
  std::optional<DType> grad_v_output;
  // matmul only (schedule/permuted_stores.h): the result, reshaped to *stored_shape, is stored as
  // permute(that, *stored_perm), each tile of the tensor-addressed kernel through strides
  // (codegen/lower_matmul_tensor.h); null: as it is.
  const Shape* stored_shape = nullptr;
  const std::vector<int64_t>* stored_perm = nullptr;
  // cached_attention only (schedule/attention_partials.h): the split row kernel stores every
  // key range's partial state as its output (attention_lowering::partials_of says where) and
  // combines nothing: the product reading the output combines them as it loads its vector.
  bool attention_partials = false;
};

using LowerFn = std::function<Lowering(const LowerContext&)>;

// The lowering of an op by name, or nullptr when the GPU cannot run it directly (composites
// are then decomposed into ops it can run).
const LowerFn* find_lowering(std::string_view op);

// Registration, one function per family file (lower_<family>.cpp).
class LoweringRegistry {
 public:
  void add(std::string op, LowerFn fn);
  std::vector<std::pair<std::string, LowerFn>> entries;
};

}  // namespace mn::codegen
