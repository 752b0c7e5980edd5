#pragma once
// Running a graph on a Vulkan device. A Session compiles the graph once (lowering, kernels,
// memory plan) and records the whole step — input uploads, every kernel, assignments (the
// optimizer update), output readbacks — into one command buffer; step() is one submission.
//
// A session may run several programs (graphs) over the same weights and state, e.g. the
// prefill and decode graphs of generation: parameters and states with the same name are one
// buffer shared by every program, each program has its own recorded command buffer, inputs and
// outputs, and the intermediates of all programs share memory (one program runs at a time).
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

namespace mn {

struct SessionOptions {
  // A device index or name substring; empty: $MN_DEVICE, else the first discrete GPU, else
  // integrated, else the CPU (lavapipe).
  std::string device;
  bool profile = false;            // GPU timestamps around every kernel (see Session::profile)
  // GPU timestamps at the two ends of every step only (Session::step_gpu_ms): the step's GPU
  // time without the cost of a timestamp per kernel.
  bool time_steps = false;
  std::optional<bool> validation;  // unset: $MN_VALIDATION
  // Debugging the memory plan: overwrite every intermediate with NaNs right after its last use,
  // so a tensor that wrongly shared memory with a dead one would read garbage.
  bool poison_freed = false;
  // Debugging NaN/Inf: every floating-point value a kernel writes is copied out after it, and
  // the wait for a step throws an mn::Error naming the first graph node (name, op, kernel) that
  // produced a NaN or Inf. Costs a copy of every intermediate per step. Unset:
  // $MN_CHECK_NUMERICS=1.
  std::optional<bool> check_numerics;
  // Out-of-range indices (take, scatter_add, one_hot, class targets of cross_entropy and
  // nll_loss, cache_write positions): the kernels reading them record the first one and the
  // wait for the step throws mn::IndexError naming the graph node, the element, the value and
  // the valid range. Either way the kernels never touch memory outside their tensors (a bad
  // index reads zero or is skipped; checked, a bad target's row is left out of the loss and its
  // gradient). Costs a few bytes read per step. Unset: on, unless $MN_CHECK_INDICES=0.
  std::optional<bool> check_indices;
  // E-graph optimization and kernel fusion ($MN_NO_OPTIMIZE=1 turns both off in every session).
  // Off, every op of the graph as written runs as its own kernel(s), the baseline the
  // benchmarks compare against.
  bool optimize = true;
  // Mixed precision: f32 (off), bf16 or f16. Every matmul of f32 operands (of at least 16 rows
  // and 16 columns) then multiplies them rounded to this dtype, accumulates in f32 and stores its result in it, as PyTorch's
  // autocast does (on tensor cores where the device has them: bf16 needs
  // VK_KHR_shader_bfloat16's cooperative matrices). Parameters, optimizer states, norms,
  // softmax and losses stay f32. f16 has no loss scaling yet: gradients below 2^-24 flush to
  // zero. Any other dtype is an mn::Error.
  DType precision = DType::f32;
  // Parameters and states the caller sets before the first step (weights read from a file):
  // their initializers are not evaluated, which for a large model is most of building the
  // session. Until set, their values are unspecified.
  std::set<std::string, std::less<>> preset;
  // The most device memory the session's arena may take. A plan that needs more (after the
  // planner's own savings: liveness, in-place updates, recomputation in the backward pass) is
  // an mn::Error naming what fills it, before any device memory is allocated. Unset: no limit
  // but the device's; 0 is an error.
  std::optional<uint64_t> memory_budget_bytes;
  // Device memory another API can import: the data-parallel trainers set it for the NCCL
  // engine, which all-reduces gradients in place. An mn::DeviceError where the device cannot
  // export memory (no VK_KHR_external_memory_fd).
  bool exportable_memory = false;
};

// Several runs of a program recorded back to back into one submission, each run's inputs
// taken from the run before's outputs or from values given per run: a decoding loop of `runs`
// tokens with no trip to the host between them (Session::step_chain).
struct ProgramChain {
  int64_t runs = 0;  // runs per submission; 0: the program has no chain
  // Inputs given one value per run (Session::set_runs): a decoding step's position and counter.
  std::vector<std::string> per_run;
  // {output, input}: the output of each run copied into the input of the next (same dtype and
  // size): a sampled token fed to the next step.
  std::vector<std::pair<std::string, std::string>> feed;
  // Outputs kept from every run (Session::get_runs).
  std::vector<std::string> collect;
};

// One program of a multi-program session.
struct SessionProgram {
  std::string name;
  const Graph* graph = nullptr;
  // The outputs copied to host memory at the end of every step, when the device's memory is not
  // host-visible (unset: all). get() of another output copies it from device memory on demand,
  // so a large output read only now and then costs no readback per step.
  std::optional<std::vector<std::string>> read_back;
  ProgramChain chain;
};

struct ProgramMemory {
  std::string name;
  uint64_t own_bytes = 0;        // its inputs, outputs and constants
  uint64_t transient_bytes = 0;  // its intermediates (the region all programs share)
  size_t dispatches = 0;
  size_t barriers = 0;
  // The intermediates live at once at its peak: values its outputs depend on (a training step's
  // forward activations), values only its assignments need (gradients and the optimizer's
  // temporaries), and kernel scratch. Their sum is at most transient_bytes.
  uint64_t activation_bytes = 0;
  uint64_t backward_bytes = 0;
  uint64_t workspace_bytes = 0;
};

struct MemorySummary {
  uint64_t arena_bytes = 0;       // one device allocation holding every tensor
  uint64_t persistent_bytes = 0;  // parameters, state, inputs, outputs, constants
  uint64_t naive_bytes = 0;       // one buffer per tensor, without sharing
  size_t tensors = 0;
  size_t dispatches = 0;
  size_t barriers = 0;
  uint64_t shared_bytes = 0;            // parameters and states (one buffer each, all programs)
  uint64_t parameter_bytes = 0;         // of shared_bytes: the parameters
  uint64_t state_bytes = 0;             // the states (optimizer moments, statistics, caches)
  std::vector<ProgramMemory> programs;  // one per program (one for a one-graph session)
};

struct KernelTime {
  std::string name;
  double ms = 0;
  // What the driver reports of the kernel ("Register Count 128, ..."), where the device was
  // created with pipeline statistics (MN_PIPELINE_STATISTICS=1); empty otherwise.
  std::string statistics;
  // What the launch computes: the first value it writes and its kernel's inputs (the first
  // six), as "matmul(bf16[1, 256, 576]) <- bf16[1, 256, 576] bf16[576, 576]"; empty for copies,
  // fills and launches that compute no value (cache prefetches). Tells apart the launches of one
  // kernel name (every small product is a matmul_tensor_t32x32k64).
  std::string operands;
};

// A profile summed by kernel name (and with `by_operands`, by KernelTime::operands too),
// largest total first: where a step's GPU time goes.
struct KernelTotal {
  std::string name;
  double ms = 0;
  int count = 0;
  std::string statistics;  // KernelTime::statistics of the first kernel of this name
  std::string operands;    // with by_operands; empty otherwise
};
std::vector<KernelTotal> kernel_totals(std::span<const KernelTime> profile,
                                       bool by_operands = false);

class Session {
 public:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Sets an input (kept for later steps until set again), a parameter or a state. Values are
  // converted to the tensor's dtype. mn::Error for an unknown name or a wrong size/shape.
  void set(std::string_view name, const Array& value);
  void set(std::string_view name, std::span<const float> values);
  void set(std::string_view name, std::span<const int32_t> values);
  void set_scalar(std::string_view name, double value);
  // Sets a tensor from little-endian elements of dtype `source` (e.g. a checkpoint's f32, f16
  // or bf16 data), converted element by element into the tensor's dtype without an Array of
  // the whole tensor. ShapeError when the byte count is not the tensor's element count.
  void set_raw(std::string_view name, DType source, std::span<const std::byte> bytes);

  // An output of the last step, or the current value of a parameter or state.
  Array get(std::string_view name) const;
  std::vector<float> get_f32(std::string_view name) const;
  // The same as little-endian elements of the tensor's own dtype, without an Array: what
  // set_raw takes back (a data-parallel step's gradients travel this way).
  std::vector<std::byte> get_raw(std::string_view name) const;

  // One step: submit and wait.
  void step();
  // Starts a step and returns at once; set()/get() wait for it to finish first.
  void submit();
  void wait();

  // Multi-program sessions. The unnamed forms above and below address a program's inputs and
  // outputs when the name belongs to one program only; step() and submit() need the program
  // when there are several.
  void step(std::string_view program);
  void submit(std::string_view program);
  void set(std::string_view program, std::string_view name, const Array& value);
  void set_raw(std::string_view program, std::string_view name, DType source,
               std::span<const std::byte> bytes);
  Array get(std::string_view program, std::string_view name) const;
  std::vector<std::string> program_names() const;
  // Chains (SessionProgram::chain). set_runs: one value per run of an input named in
  // ProgramChain::per_run, shaped [runs, ...the input's shape]. step_chain: the chain's runs in
  // one submission, then the wait; the other inputs are those set(), a fed input's for the first
  // run only; afterwards the fed and per-run inputs count as never set for step() and the next
  // chain (set them again). get_runs: a collected output of every run of the last chain,
  // [runs, ...its shape]; get() of an output reads the last run's. mn::Error for a program
  // without a chain, a name the chain does not list, a wrong shape, or inputs never set.
  void set_runs(std::string_view program, std::string_view input, const Array& values);
  void step_chain(std::string_view program);
  Array get_runs(std::string_view program, std::string_view output) const;
  int64_t chain_runs(std::string_view program) const;  // 0 without a chain
  std::vector<std::string> input_names(std::string_view program) const;
  std::vector<std::string> output_names(std::string_view program) const;

  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  std::vector<std::string> parameter_names() const;
  std::vector<std::string> state_names() const;
  TensorType type_of(std::string_view name) const;

  const std::string& device_name() const;
  MemorySummary memory() const;
  // Per-kernel GPU times of the last step (SessionOptions::profile).
  std::vector<KernelTime> profile() const;
  // The same for one program's last run (its chain's runs when the chain ran last).
  std::vector<KernelTime> profile(std::string_view program) const;
  // GPU milliseconds of the last step of `program`, first dispatch to last (with
  // SessionOptions::time_steps or profile; 0 otherwise).
  double step_gpu_ms(std::string_view program) const;
  // The same for the last chain of `program` (all its runs).
  double chain_gpu_ms(std::string_view program) const;
  // The graph as compiled (composites decomposed for the GPU).
  const Graph& compiled_graph() const;

 private:
  friend struct SessionAccess;  // the library's own parts (src/runtime/session_access.h)
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Session> build_session(const Graph& graph, const SessionOptions& options = {});
// Several programs in one session. mn::Error for duplicate or empty program names, a parameter
// or state whose type (or kind) differs between programs (naming it and both types), or a
// read_back entry that is not an output. A shared tensor takes its initial value from the first
// program that has it.
std::unique_ptr<Session> build_session(const std::vector<SessionProgram>& programs,
                                       const SessionOptions& options = {});

}  // namespace mn
