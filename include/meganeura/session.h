#pragma once
// Running a graph on a Vulkan device. A Session compiles the graph once (lowering, kernels,
// memory plan) and records the whole step — input uploads, every kernel, assignments (the
// optimizer update), output readbacks — into one command buffer; step() is one submission.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

namespace mn {

struct SessionOptions {
  // A device index or name substring; empty: $MN_DEVICE, else the first discrete GPU, else
  // integrated, else the CPU (lavapipe).
  std::string device;
  bool profile = false;            // GPU timestamps around every kernel (see Session::profile)
  std::optional<bool> validation;  // unset: $MN_VALIDATION
  // Debugging the memory plan: overwrite every intermediate with NaNs right after its last use,
  // so a tensor that wrongly shared memory with a dead one would read garbage.
  bool poison_freed = false;
  // E-graph optimization and kernel fusion ($MN_NO_OPTIMIZE=1 turns both off in every session).
  // Off, every op of the graph as written runs as its own kernel(s), the baseline the
  // benchmarks compare against.
  bool optimize = true;
};

struct MemorySummary {
  uint64_t arena_bytes = 0;       // one device allocation holding every tensor
  uint64_t persistent_bytes = 0;  // parameters, state, inputs, outputs, constants
  uint64_t naive_bytes = 0;       // one buffer per tensor, without sharing
  size_t tensors = 0;
  size_t dispatches = 0;
  size_t barriers = 0;
};

struct KernelTime {
  std::string name;
  double ms = 0;
};

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

  // One step: submit and wait.
  void step();
  // Starts a step and returns at once; set()/get() wait for it to finish first.
  void submit();
  void wait();

  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  std::vector<std::string> parameter_names() const;
  std::vector<std::string> state_names() const;
  TensorType type_of(std::string_view name) const;

  const std::string& device_name() const;
  MemorySummary memory() const;
  // Per-kernel GPU times of the last step (SessionOptions::profile).
  std::vector<KernelTime> profile() const;
  // The graph as compiled (composites decomposed for the GPU).
  const Graph& compiled_graph() const;

 private:
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Session> build_session(const Graph& graph, const SessionOptions& options = {});

// Names of the Vulkan devices, one per line with their index and type (for `mn devices`).
std::string list_devices();

}  // namespace mn
