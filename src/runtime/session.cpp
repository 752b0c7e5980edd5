#include <meganeura/session.h>

#include <bit>
#include <map>

#include "codegen/shader_cache.h"
#include "ir/op_def.h"
#include "plan/step_plan.h"
#include "runtime/convert_raw.h"
#include "runtime/device_pool.h"
#include "runtime/host_tensor.h"
#include "runtime/plan_options.h"
#include "vulkan/arena.h"
#include "vulkan/buffer.h"
#include "vulkan/device.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn {

struct Session::Impl {
  std::shared_ptr<vk::Device> device;
  plan::StepPlan plan;
  std::unique_ptr<vk::Arena> arena;
  std::unique_ptr<vk::StagingBuffer> upload, readback;
  std::map<std::string, uint64_t, std::less<>> upload_offset, readback_offset;  // by name
  std::map<std::string, std::unique_ptr<vk::Pipeline>> pipelines;               // by GLSL source
  std::unique_ptr<vk::Recording> recording;
  std::map<std::string, bool, std::less<>> input_set;
  bool pending = false;

  const Node& node_named(std::string_view name, const char* what) const;
  const plan::PlannedBuffer& buffer_of(NodeId id) const {
    return plan.buffers[static_cast<size_t>(plan.node_buffer[id])];
  }
  void write_tensor(std::string_view name, std::span<const std::byte> bytes);
  void finish_pending() {
    if (pending) {
      pending = false;
      recording->wait();
    }
  }
};

namespace {

std::vector<std::byte> host_bytes(const Array& a, DType dtype) {
  std::vector<std::byte> bytes(a.data.size() * dtype_size(dtype));
  runtime::encode(std::span<const double>(a.data), dtype, bytes);
  return bytes;
}

}  // namespace

const Node& Session::Impl::node_named(std::string_view name, const char* what) const {
  for (const auto* m : {&plan.inputs, &plan.persistents, &plan.outputs}) {
    auto it = m->find(name);
    if (it != m->end()) return plan.graph.node(it->second);
  }
  std::string known;
  for (const auto* m : {&plan.inputs, &plan.persistents, &plan.outputs}) {
    for (const auto& [n, id] : *m) known += (known.empty() ? "" : ", ") + n;
  }
  throw Error(std::string(what) + ": no input, parameter, state or output named '" +
              std::string(name) + "' (have: " + known + ")");
}

void Session::Impl::write_tensor(std::string_view name, std::span<const std::byte> bytes) {
  if (!plan.inputs.count(name) && !plan.persistents.count(name)) {
    throw Error("Session::set: '" + std::string(name) +
                "' is an output; outputs are read, not set");
  }
  finish_pending();
  if (auto it = upload_offset.find(name); it != upload_offset.end()) {
    upload->write(it->second, bytes);  // copied into the arena by the recorded step
    input_set[std::string(name)] = true;
    return;
  }
  auto id = plan.inputs.count(name) ? plan.inputs.find(name)->second
                                    : plan.persistents.find(name)->second;
  arena->write(buffer_of(id).offset, bytes);
  if (plan.inputs.count(name)) input_set[std::string(name)] = true;
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() {
  if (impl_ && impl_->pending) {
    try {
      impl_->recording->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): destructors must not throw
    }
  }
}

std::unique_ptr<Session> build_session(const Graph& graph, const SessionOptions& options) {
  auto impl = std::make_unique<Session::Impl>();
  impl->device = runtime::shared_device(options.device, options.validation);
  vk::Device& dev = *impl->device;
  const auto& caps = dev.capabilities();

  plan::PlanOptions po = runtime::plan_options(dev);
  po.optimize.enabled = po.fuse = options.optimize;
  impl->plan = plan::make_step_plan(graph, po);
  plan::StepPlan& p = impl->plan;

  vk::ArenaOptions ao;
  ao.chunk_bytes = po.chunk_bytes;
  impl->arena = std::make_unique<vk::Arena>(dev, std::max<uint64_t>(p.arena_bytes, 256), ao);
  vk::Arena& arena = *impl->arena;

  // Kernels: compile every distinct shader (in parallel, cached on disk), one pipeline each.
  static codegen::ShaderCache cache;
  std::vector<codegen::ShaderSource> sources;
  std::map<std::string, size_t> source_index;
  codegen::CompileOptions co;
  co.target = codegen::target_env_for(caps.api_version);
  for (const auto& l : p.launches) {
    if (source_index.emplace(l.kernel.glsl, sources.size()).second) {
      co.name = l.kernel.name;
      // Cooperative-matrix kernels through the KHR rewrite: the device's path, or the kernel's
      // own need (workgroup-scope matrices exist only as KHR types).
      co.coop_khr = po.device.coop_khr || l.kernel.coop_khr;
      sources.push_back({l.kernel.glsl, co});
    }
  }
  auto spirv = cache.get_batch(sources);
  for (const auto& l : p.launches) {
    auto& slot = impl->pipelines[l.kernel.glsl];
    if (slot) continue;
    vk::KernelInterface ki;
    ki.buffer_count = static_cast<uint32_t>(l.kernel.bindings.size());
    ki.workgroup_size = l.kernel.workgroup;
    slot =
        std::make_unique<vk::Pipeline>(dev, spirv[source_index[l.kernel.glsl]], ki, l.kernel.name);
  }

  // Host-side staging for inputs and outputs, unless the host maps the arena itself.
  const bool direct = arena.host_mapped();
  uint64_t up_bytes = 0, down_bytes = 0;
  if (!direct) {
    for (const auto& [name, id] : p.inputs) {
      impl->upload_offset[name] = up_bytes;
      up_bytes += (impl->buffer_of(id).bytes + 15) / 16 * 16;
    }
    for (const auto& [name, id] : p.outputs) {
      impl->readback_offset[name] = down_bytes;
      down_bytes += (impl->buffer_of(id).bytes + 15) / 16 * 16;
    }
    impl->upload =
        std::make_unique<vk::StagingBuffer>(dev, std::max<uint64_t>(up_bytes, 16), false);
    impl->readback =
        std::make_unique<vk::StagingBuffer>(dev, std::max<uint64_t>(down_bytes, 16), true);
  }

  // Initial values: parameters and states from their initializers, constants as given.
  for (size_t i = 0; i < p.graph.size(); ++i) {
    const Node& n = p.graph.node(static_cast<NodeId>(i));
    if (p.node_buffer[i] < 0) continue;
    const plan::PlannedBuffer& b = p.buffers[static_cast<size_t>(p.node_buffer[i])];
    std::optional<Array> value;
    if (n.op_name() == "parameter")
      value = initialize(n.attrs.as<ParameterAttrs>().init, n.type.shape, n.type.dtype);
    if (n.op_name() == "state")
      value = initialize(n.attrs.as<StateAttrs>().init, n.type.shape, n.type.dtype);
    if (n.op_name() == "constant") value = *n.attrs.as<ConstantAttrs>().value.array;
    if (value) arena.write(b.offset, host_bytes(*value, n.type.dtype));
  }

  // The step: uploads, kernels, assignment copies, readbacks.
  vk::RecordingOptions ro;
  ro.timestamps = options.profile;
  ro.label = "step";
  impl->recording = std::make_unique<vk::Recording>(dev, ro);
  vk::Recording& rec = *impl->recording;
  auto range_of = [&](int buffer) {
    const plan::PlannedBuffer& b = p.buffers[static_cast<size_t>(buffer)];
    return arena.range(b.offset, b.bytes);
  };
  if (!direct) {
    for (const auto& [name, id] : p.inputs) {
      rec.upload(*impl->upload, impl->upload_offset[name], range_of(p.node_buffer[id]));
    }
  }
  // Intermediates whose last reader is launch i, for poisoning.
  std::vector<std::vector<int>> dead_after(p.launches.size());
  if (options.poison_freed) {
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const auto& buf = p.buffers[b];
      if (!buf.persistent && buf.last_use < static_cast<int>(p.launches.size())) {
        dead_after[static_cast<size_t>(buf.last_use)].push_back(static_cast<int>(b));
      }
    }
  }
  for (size_t li = 0; li < p.launches.size(); ++li) {
    const auto& l = p.launches[li];
    vk::Dispatch d;
    d.pipeline = impl->pipelines[l.kernel.glsl].get();
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      d.buffers.push_back({range_of(l.buffers[k]),
                           l.kernel.bindings[k].written ? vk::Access::write : vk::Access::read});
    }
    d.groups = l.kernel.groups;
    d.label = l.kernel.name;
    rec.dispatch(std::move(d));
    for (int b : dead_after[li]) {
      const plan::PlannedBuffer& buf = p.buffers[static_cast<size_t>(b)];
      rec.fill(arena.range(buf.offset, (buf.bytes + 3) / 4 * 4), 0x7fc00000u);  // quiet NaN
    }
  }
  for (const auto& [from, to] : p.assignment_copies) rec.copy(range_of(from), range_of(to));
  if (!direct) {
    for (const auto& [name, id] : p.outputs) {
      rec.download(range_of(p.node_buffer[id]), *impl->readback, impl->readback_offset[name]);
    }
  }
  rec.finish();
  dev.check_validation("building the session");
  return std::make_unique<Session>(std::move(impl));
}

void Session::set(std::string_view name, const Array& value) {
  const Node& n = impl_->node_named(name, "Session::set");
  if (value.shape != n.type.shape && value.numel() != n.type.numel()) {
    throw ShapeError("Session::set '" + std::string(name) + "': expected " + n.type.str() +
                     ", got shape " + shape_str(value.shape));
  }
  impl_->write_tensor(name, host_bytes(value, n.type.dtype));
}

namespace {
// Encodes host values of any element type into the tensor's dtype after checking the count.
template <class T>
std::vector<std::byte> checked_bytes(const Node& n, std::string_view name,
                                     std::span<const T> values) {
  if (static_cast<int64_t>(values.size()) != n.type.numel()) {
    throw ShapeError("Session::set '" + std::string(name) + "': expected " +
                     std::to_string(n.type.numel()) + " values for " + n.type.str() + ", got " +
                     std::to_string(values.size()));
  }
  std::vector<std::byte> bytes(values.size() * dtype_size(n.type.dtype));
  runtime::encode(values, n.type.dtype, bytes);
  return bytes;
}
}  // namespace

void Session::set(std::string_view name, std::span<const float> values) {
  impl_->write_tensor(name, checked_bytes(impl_->node_named(name, "Session::set"), name, values));
}

void Session::set(std::string_view name, std::span<const int32_t> values) {
  impl_->write_tensor(name, checked_bytes(impl_->node_named(name, "Session::set"), name, values));
}

void Session::set_scalar(std::string_view name, double value) {
  const Node& n = impl_->node_named(name, "Session::set_scalar");
  if (n.type.numel() != 1) {
    throw ShapeError("Session::set_scalar '" + std::string(name) + "': tensor is " + n.type.str());
  }
  set(name, Array(n.type.shape, n.type.dtype, {value}));
}

void Session::set_raw(std::string_view name, DType source, std::span<const std::byte> bytes) {
  const Node& n = impl_->node_named(name, "Session::set_raw");
  const uint64_t count = static_cast<uint64_t>(n.type.numel());
  if (bytes.size() != count * dtype_size(source)) {
    throw ShapeError("Session::set_raw '" + std::string(name) + "': expected " +
                     std::to_string(count) + " " + dtype_name(source) + " elements (" +
                     std::to_string(count * dtype_size(source)) + " bytes) for " + n.type.str() +
                     ", got " + std::to_string(bytes.size()) + " bytes");
  }
  std::vector<std::byte> converted(count * dtype_size(n.type.dtype));
  runtime::convert_elements(bytes, source, converted, n.type.dtype);
  impl_->write_tensor(name, converted);
}

Array Session::get(std::string_view name) const {
  impl_->finish_pending();
  const Node& n = impl_->node_named(name, "Session::get");
  std::vector<std::byte> bytes(static_cast<size_t>(n.type.numel()) * dtype_size(n.type.dtype));
  auto out = impl_->plan.outputs.find(name);
  if (out != impl_->plan.outputs.end() && impl_->readback) {
    impl_->readback->read(impl_->readback_offset.at(std::string(name)), bytes);
  } else {
    NodeId id = out != impl_->plan.outputs.end()      ? out->second
                : impl_->plan.persistents.count(name) ? impl_->plan.persistents.find(name)->second
                                                      : impl_->plan.inputs.find(name)->second;
    impl_->arena->read(impl_->buffer_of(id).offset, bytes);
  }
  return Array(n.type.shape, n.type.dtype,
               runtime::decode(bytes, n.type.dtype, static_cast<size_t>(n.type.numel())));
}

std::vector<float> Session::get_f32(std::string_view name) const { return get(name).to_f32(); }

void Session::submit() {
  impl_->finish_pending();
  std::string missing;
  for (const auto& [name, id] : impl_->plan.inputs) {
    if (!impl_->input_set[name]) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) throw Error("Session::step: inputs never set: " + missing);
  impl_->recording->submit();
  impl_->pending = true;
}

void Session::wait() { impl_->finish_pending(); }

void Session::step() {
  submit();
  wait();
}

namespace {
std::vector<std::string> keys(const std::map<std::string, NodeId, std::less<>>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}
}  // namespace

std::vector<std::string> Session::input_names() const { return keys(impl_->plan.inputs); }
std::vector<std::string> Session::output_names() const { return keys(impl_->plan.outputs); }
std::vector<std::string> Session::parameter_names() const {
  std::vector<std::string> out;
  for (NodeId id : impl_->plan.graph.parameters()) out.push_back(impl_->plan.graph.node(id).name);
  return out;
}
std::vector<std::string> Session::state_names() const {
  std::vector<std::string> out;
  for (NodeId id : impl_->plan.graph.states()) out.push_back(impl_->plan.graph.node(id).name);
  return out;
}
TensorType Session::type_of(std::string_view name) const {
  return impl_->node_named(name, "Session::type_of").type;
}

const std::string& Session::device_name() const { return impl_->device->capabilities().name; }

MemorySummary Session::memory() const {
  MemorySummary m;
  m.arena_bytes = impl_->plan.arena_bytes;
  m.persistent_bytes = impl_->plan.memory.persistent_bytes;
  m.naive_bytes = impl_->plan.memory.naive_bytes;
  m.tensors = impl_->plan.buffers.size();
  m.dispatches = impl_->recording->dispatch_count();
  m.barriers = impl_->recording->barrier_count();
  return m;
}

std::vector<KernelTime> Session::profile() const {
  impl_->finish_pending();
  std::vector<KernelTime> out;
  for (const auto& t : impl_->recording->timings()) out.push_back({t.label, t.ms});
  return out;
}

const Graph& Session::compiled_graph() const { return impl_->plan.graph; }

}  // namespace mn
