#include <meganeura/session.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>

#include "codegen/index_check.h"
#include "codegen/shader/shader_cache.h"
#include "ir/op_def.h"
#include "plan/memory_breakdown.h"
#include "plan/program_layout.h"
#include "plan/step_plan.h"
#include "runtime/convert_raw.h"
#include "runtime/device_pool.h"
#include "runtime/host_tensor.h"
#include "runtime/index_check.h"
#include "runtime/numerics_check.h"
#include "runtime/plan_options.h"
#include "runtime/program_chain.h"
#include "runtime/record_step.h"
#include "runtime/session_access.h"
#include "runtime/session_impl.h"
#include "support/parallel_for.h"
#include "vulkan/arena.h"
#include "vulkan/buffer.h"
#include "vulkan/device.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn {

std::vector<std::byte> host_bytes(const Array& a, DType dtype) {
  std::vector<std::byte> bytes(a.data.size() * dtype_size(dtype));
  runtime::encode(std::span<const double>(a.data), dtype, bytes);
  return bytes;
}

namespace {

std::string known_names(const Program& p) {
  std::string known;
  for (const auto* m : {&p.plan.inputs, &p.plan.persistents, &p.plan.outputs}) {
    for (const auto& [n, id] : *m) known += (known.empty() ? "" : ", ") + n;
  }
  return known;
}

}  // namespace

Program& Session::Impl::program(std::string_view name, const char* what) {
  std::string known;
  for (Program& p : programs) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw Error(std::string(what) + ": no program named '" + std::string(name) + "' (have: " +
              known + ")");
}

Program& Session::Impl::owner(std::string_view name, const char* what) {
  std::vector<Program*> found;
  for (Program& p : programs) {
    if (p.plan.persistents.count(name)) return p;
    if (p.find(name)) found.push_back(&p);
  }
  if (found.size() == 1) return *found.front();
  if (found.empty()) {
    std::string known;
    for (const Program& p : programs) known += (known.empty() ? "" : "; ") + known_names(p);
    throw Error(std::string(what) + ": no input, parameter, state or output named '" +
                std::string(name) + "' (have: " + known + ")");
  }
  std::string which;
  for (const Program* p : found) which += (which.empty() ? "" : ", ") + p->name;
  throw Error(std::string(what) + ": '" + std::string(name) + "' belongs to programs " + which +
              "; name the program");
}

void Session::Impl::write_tensor(Program& p, std::string_view name,
                                 std::span<const std::byte> bytes) {
  if (!p.plan.inputs.count(name) && !p.plan.persistents.count(name)) {
    throw Error("Session::set: '" + std::string(name) +
                "' is an output; outputs are read, not set");
  }
  finish_pending();
  if (auto it = p.upload_offset.find(name); it != p.upload_offset.end()) {
    p.upload->write(it->second, bytes);  // copied into the arena by the recorded step
    p.input_set[std::string(name)] = true;
    return;
  }
  auto id = p.plan.inputs.count(name) ? p.plan.inputs.find(name)->second
                                      : p.plan.persistents.find(name)->second;
  arena->write(p.buffer_of(id).offset, bytes);
  if (p.plan.inputs.count(name)) p.input_set[std::string(name)] = true;
}

std::vector<std::byte> Session::Impl::read_bytes(const Program& p, std::string_view name) {
  if (!p.stepped && !p.plan.inputs.count(name) && !p.plan.persistents.count(name)) {
    throw Error("Session::get '" + std::string(name) + "': an output of program '" + p.name +
                "', which has not run a step yet");
  }
  finish_pending();
  const Node& n = *p.find(name);
  std::vector<std::byte> bytes(static_cast<size_t>(n.type.numel()) * dtype_size(n.type.dtype));
  auto staged = p.readback_offset.find(name);
  if (staged != p.readback_offset.end()) {
    p.readback->read(staged->second, bytes);
  } else {  // host-mapped arena, or an output not read back every step: on demand
    arena->read(p.buffer_of(p.id_of(name)).offset, bytes);
  }
  return bytes;
}

Array Session::Impl::read_tensor(const Program& p, std::string_view name) {
  const std::vector<std::byte> bytes = read_bytes(p, name);
  const Node& n = *p.find(name);
  return Array(n.type.shape, n.type.dtype,
               runtime::decode(bytes, n.type.dtype, static_cast<size_t>(n.type.numel())));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() {
  if (impl_ && impl_->pending >= 0) {
    try {
      Program& p = impl_->programs[static_cast<size_t>(impl_->pending)];
      (impl_->pending_chain ? p.chain->recording : p.recording)->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): destructors must not throw
    }
  }
}

namespace {

// Compiles every distinct shader of every program that has no pipeline yet and creates its
// pipeline, both on several threads (shaders cached on disk): drivers compile a pipeline as it
// is created (tensor-core kernels take long), and pipeline creation and the pipeline cache are
// thread-safe in Vulkan.
void build_pipelines(Session::Impl& impl, const plan::PlanOptions& po) {
  static codegen::ShaderCache cache;
  std::vector<const codegen::KernelLaunch*> kernels;
  std::vector<codegen::ShaderSource> sources;
  std::set<std::string_view> seen;
  codegen::CompileOptions co;
  co.target = codegen::target_env_for(impl.device->capabilities().api_version);
  for (const Program& p : impl.programs) {
    for (const auto& l : p.plan.launches) {
      if (impl.pipelines.contains(l.kernel.glsl) || !seen.insert(l.kernel.glsl).second) continue;
      co.name = l.kernel.name;
      // Cooperative-matrix kernels through the KHR rewrite: the device's path, or the
      // kernel's own need (workgroup-scope matrices exist only as KHR types).
      co.coop_khr = (po.device.coop_khr || l.kernel.coop_khr) && !l.kernel.current_compiler;
      co.compiler = l.kernel.current_compiler ? codegen::GlslCompiler::current
                                              : codegen::GlslCompiler::linked;
      kernels.push_back(&l.kernel);
      sources.push_back({l.kernel.glsl, co});
    }
  }
  const auto spirv = cache.get_batch(sources);
  std::vector<std::unique_ptr<vk::Pipeline>> made(kernels.size());
  support::parallel_for(kernels.size(), 0, [&](size_t i) {
    vk::KernelInterface ki;
    ki.buffer_count = static_cast<uint32_t>(kernels[i]->bindings.size());
    ki.workgroup_size = kernels[i]->workgroup;
    made[i] = std::make_unique<vk::Pipeline>(*impl.device, spirv[i], ki, kernels[i]->name);
  });
  for (size_t i = 0; i < kernels.size(); ++i) impl.pipelines[kernels[i]->glsl] = std::move(made[i]);
}

// Host-side staging for inputs (where the host cannot write the arena) and for the outputs read
// back every step (where it cannot read the arena, or reads it uncached: a discrete GPU's BAR,
// where reading Whisper's 2.3 MB of hidden states took ~40 ms against ~1 for a copy).
void build_staging(vk::Device& dev, Program& p, const SessionProgram& spec,
                   const vk::Arena& arena) {
  if (!arena.host_mapped()) {
    uint64_t up_bytes = 0;
    for (const auto& [name, id] : p.plan.inputs) {
      p.upload_offset[name] = up_bytes;
      up_bytes += (p.buffer_of(id).bytes + 15) / 16 * 16;
    }
    p.upload = std::make_unique<vk::StagingBuffer>(dev, std::max<uint64_t>(up_bytes, 16), false);
  }
  if (arena.host_reads_cached()) return;
  uint64_t down_bytes = 0;
  for (const auto& [name, id] : p.plan.outputs) {
    if (spec.read_back &&
        std::find(spec.read_back->begin(), spec.read_back->end(), name) == spec.read_back->end())
      continue;
    if (arena.host_mapped() && p.buffer_of(id).bytes <= vk::Arena::kDirectReadBytes) continue;
    p.readback_offset[name] = down_bytes;
    down_bytes += (p.buffer_of(id).bytes + 15) / 16 * 16;
  }
  if (p.readback_offset.empty() && arena.host_mapped()) return;
  p.readback = std::make_unique<vk::StagingBuffer>(dev, std::max<uint64_t>(down_bytes, 16), true);
}

// Zero bytes written a slice at a time (a KV cache may be gigabytes).
void write_zeros(vk::Arena& arena, uint64_t offset, uint64_t bytes) {
  const std::vector<std::byte> zeros(std::min<uint64_t>(bytes, uint64_t{1} << 20));
  for (uint64_t done = 0; done < bytes; done += zeros.size()) {
    const uint64_t n = std::min<uint64_t>(zeros.size(), bytes - done);
    arena.write(offset + done, std::span<const std::byte>(zeros.data(), n));
  }
}

// Parameters and states from their initializers (a shared one once, none for the caller's
// preset ones), constants as given.
void write_initial_values(vk::Arena& arena, const Program& p, const SessionOptions& options,
                          std::set<std::string>& written) {
  for (size_t i = 0; i < p.plan.graph.size(); ++i) {
    const Node& n = p.plan.graph.node(static_cast<NodeId>(i));
    if (p.plan.node_buffer[i] < 0) continue;
    const plan::PlannedBuffer& buffer = p.buffer_of(static_cast<NodeId>(i));
    const std::string_view op = n.op_name();
    if (op == "constant") {
      arena.write(buffer.offset, host_bytes(*n.attrs.as<ConstantAttrs>().value.array, n.type.dtype));
      continue;
    }
    if ((op != "parameter" && op != "state") || !written.insert(n.name).second ||
        options.preset.count(n.name)) {
      continue;
    }
    const Init& init = op == "parameter" ? n.attrs.as<ParameterAttrs>().init
                                         : n.attrs.as<StateAttrs>().init;
    if (init.kind == Init::Kind::zeros) {
      write_zeros(arena, buffer.offset, plan::device_bytes(n.type));
    } else {
      arena.write(buffer.offset, host_bytes(initialize(init, n.type.shape, n.type.dtype), n.type.dtype));
    }
  }
}

void check_programs(const std::vector<SessionProgram>& specs) {
  if (specs.empty()) throw Error("build_session: no programs");
  std::set<std::string> names;
  for (const SessionProgram& s : specs) {
    if (s.name.empty() || !s.graph) {
      throw Error("build_session: every program needs a name and a graph");
    }
    if (!names.insert(s.name).second) {
      throw Error("build_session: two programs named '" + s.name + "'");
    }
    for (const std::string& out : s.read_back.value_or(std::vector<std::string>{})) {
      if (!s.graph->find_output(out)) {
        throw Error("build_session: program '" + s.name + "' reads back '" + out +
                    "', which is not one of its outputs");
      }
    }
  }
}

std::string mib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

// The arena against SessionOptions::memory_budget_bytes, with what fills it when it is over.
void check_memory_budget(const Session::Impl& impl, uint64_t budget) {
  const plan::ProgramsLayout& layout = impl.layout;
  if (layout.arena_bytes <= budget) return;
  std::string what = "parameters and states " + mib(layout.shared_bytes);
  for (size_t i = 0; i < impl.programs.size(); ++i) {
    const Program& p = impl.programs[i];
    const plan::MemoryBreakdown b = plan::memory_breakdown(p.plan);
    what += "; program '" + p.name + "': inputs, outputs and constants " +
            mib(layout.own_bytes[i]) + ", intermediates " + mib(layout.transient_bytes[i]) +
            " (live at its peak: activations " + mib(b.activation_bytes) + ", gradients and " +
            "optimizer temporaries " + mib(b.backward_bytes) + ", kernel scratch " +
            mib(b.workspace_bytes) + ")";
  }
  throw Error("the session needs an arena of " + mib(layout.arena_bytes) +
              ", over its memory budget of " + mib(budget) + ": " + what +
              ". A smaller batch or sequence, or SessionOptions::precision bf16, needs less.");
}

}  // namespace

std::unique_ptr<Session> build_session(const std::vector<SessionProgram>& specs,
                                       const SessionOptions& options) {
  check_programs(specs);
  if (options.memory_budget_bytes && *options.memory_budget_bytes == 0) {
    throw Error("SessionOptions::memory_budget_bytes must be positive (unset for no limit)");
  }
  auto impl = std::make_unique<Session::Impl>();
  impl->device = runtime::shared_device(options.device, options.validation);
  vk::Device& dev = *impl->device;

  plan::PlanOptions po = runtime::plan_options(dev);
  po.optimize.enabled = po.fuse = options.optimize;
  po.check_indices = options.check_indices.value_or(runtime::check_indices_from_env());
  if (options.precision != DType::f32 && options.precision != DType::bf16 &&
      options.precision != DType::f16) {
    throw Error(std::string("SessionOptions::precision must be f32, bf16 or f16, got ") +
                dtype_name(options.precision));
  }
  po.precision = options.precision;
  std::vector<plan::StepPlan*> plans;
  std::vector<std::string> names;
  impl->programs.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    impl->programs[i].name = specs[i].name;
    impl->programs[i].plan = plan::make_step_plan(*specs[i].graph, po);
    plans.push_back(&impl->programs[i].plan);
    names.push_back(specs[i].name);
  }
  impl->layout = plan::place_programs(plans, names, po.alignment, po.chunk_bytes);
  if (options.memory_budget_bytes) check_memory_budget(*impl, *options.memory_budget_bytes);

  vk::ArenaOptions ao;
  ao.chunk_bytes = po.chunk_bytes;
  ao.exportable = options.exportable_memory;
  // MN_MAP_ARENA=0: staging copies as on a discrete GPU without resizable BAR, wherever the
  // host could map the arena; MN_MAP_ARENA=write: mapped, but read through copies as a discrete
  // GPU's BAR is (tests of both paths on lavapipe).
  if (const char* map = std::getenv("MN_MAP_ARENA"); map && *map) {
    const std::string_view v = map;
    if (v == "0") {
      ao.host_access = vk::ArenaOptions::HostAccess::never;
    } else if (v == "write") {
      ao.uncached_reads = true;
    } else if (v != "1") {
      throw Error("MN_MAP_ARENA='" + std::string(v) + "' is none of 1 (map where the host can, " +
                  "the default), 0 (staging copies) and write (mapped, read through copies)");
    }
  }
  impl->arena =
      std::make_unique<vk::Arena>(dev, std::max<uint64_t>(impl->layout.arena_bytes, 256), ao);
  build_pipelines(*impl, po);
  std::set<std::string> initialized;
  for (size_t i = 0; i < specs.size(); ++i) {
    Program& p = impl->programs[i];
    // The host maps the arena itself on some devices: no staging then, or for readbacks only.
    build_staging(dev, p, specs[i], *impl->arena);
    if (options.check_numerics.value_or(runtime::check_numerics_from_env()))
      p.numerics = runtime::plan_numerics_check(dev, p.plan);
    write_initial_values(*impl->arena, p, options, initialized);
    for (int b : p.plan.zeroed_buffers) {
      const plan::PlannedBuffer& buf = p.plan.buffers[static_cast<size_t>(b)];
      impl->arena->write(buf.offset, std::vector<std::byte>(buf.bytes));
    }
    if (!p.plan.index_checks.empty()) p.index_slots.emplace(dev, *impl->arena, p.plan);
    runtime::build_chain(dev, p, specs[i].chain, impl->arena->host_mapped());
    runtime::record_step(*impl, p, options);
    if (p.chain) runtime::record_chain(*impl, p, options);
  }
  dev.check_validation("building the session");
  return std::make_unique<Session>(std::move(impl));
}

std::unique_ptr<Session> build_session(const Graph& graph, const SessionOptions& options) {
  return build_session(std::vector<SessionProgram>{{"step", &graph, std::nullopt}}, options);
}

namespace {
// Checks a host value against the tensor's type and encodes it.
std::vector<std::byte> array_bytes(const Node& n, std::string_view name, const Array& value) {
  if (value.shape != n.type.shape) {
    throw ShapeError("Session::set '" + std::string(name) + "': expected " + n.type.str() +
                     ", got shape " + shape_str(value.shape));
  }
  return host_bytes(value, n.type.dtype);
}

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

// A tensor of program `p` by name; mn::Error (starting with `what`) listing the program's names.
const Node& program_node(const Program& p, std::string_view name, const char* what) {
  const Node* n = p.find(name);
  if (!n) {
    throw Error(std::string(what) + ": program '" + p.name +
                "' has no input, parameter or state named '" + std::string(name) +
                "' (have: " + known_names(p) + ")");
  }
  return *n;
}

// set_raw once the tensor is known: the byte count checked, the bytes written as they are when
// the dtypes agree, converted element by element otherwise.
void write_raw(Session::Impl& impl, Program& p, const Node& n, std::string_view name,
               DType source, std::span<const std::byte> bytes) {
  const uint64_t count = static_cast<uint64_t>(n.type.numel());
  if (bytes.size() != count * dtype_size(source)) {
    throw ShapeError("Session::set_raw '" + std::string(name) + "': expected " +
                     std::to_string(count) + " " + dtype_name(source) + " elements (" +
                     std::to_string(count * dtype_size(source)) + " bytes) for " + n.type.str() +
                     ", got " + std::to_string(bytes.size()) + " bytes");
  }
  if (source == n.type.dtype) {
    impl.write_tensor(p, name, bytes);
    return;
  }
  std::vector<std::byte> converted(count * dtype_size(n.type.dtype));
  runtime::convert_elements(bytes, source, converted, n.type.dtype);
  impl.write_tensor(p, name, converted);
}

}  // namespace

void Session::set(std::string_view name, const Array& value) {
  Program& p = impl_->owner(name, "Session::set");
  impl_->write_tensor(p, name, array_bytes(*p.find(name), name, value));
}

void Session::set(std::string_view program, std::string_view name, const Array& value) {
  Program& p = impl_->program(program, "Session::set");
  impl_->write_tensor(p, name, array_bytes(program_node(p, name, "Session::set"), name, value));
}

void Session::set(std::string_view name, std::span<const float> values) {
  Program& p = impl_->owner(name, "Session::set");
  impl_->write_tensor(p, name, checked_bytes(*p.find(name), name, values));
}

void Session::set(std::string_view name, std::span<const int32_t> values) {
  Program& p = impl_->owner(name, "Session::set");
  impl_->write_tensor(p, name, checked_bytes(*p.find(name), name, values));
}

void Session::set_scalar(std::string_view name, double value) {
  const Node& n = impl_->node_named(name, "Session::set_scalar");
  if (n.type.numel() != 1) {
    throw ShapeError("Session::set_scalar '" + std::string(name) + "': tensor is " + n.type.str());
  }
  set(name, Array(n.type.shape, n.type.dtype, {value}));
}

void Session::set_raw(std::string_view name, DType source, std::span<const std::byte> bytes) {
  Program& p = impl_->owner(name, "Session::set_raw");
  write_raw(*impl_, p, *p.find(name), name, source, bytes);
}

void Session::set_raw(std::string_view program, std::string_view name, DType source,
                      std::span<const std::byte> bytes) {
  Program& p = impl_->program(program, "Session::set_raw");
  write_raw(*impl_, p, program_node(p, name, "Session::set_raw"), name, source, bytes);
}

Array Session::get(std::string_view name) const {
  return impl_->read_tensor(impl_->owner(name, "Session::get"), name);
}

Array Session::get(std::string_view program, std::string_view name) const {
  const Program& p = impl_->program(program, "Session::get");
  if (!p.find(name)) {
    throw Error("Session::get: program '" + p.name + "' has no tensor named '" +
                std::string(name) + "' (have: " + known_names(p) + ")");
  }
  return impl_->read_tensor(p, name);
}

std::vector<float> Session::get_f32(std::string_view name) const { return get(name).to_f32(); }

std::vector<std::byte> Session::get_raw(std::string_view name) const {
  return impl_->read_bytes(impl_->owner(name, "Session::get_raw"), name);
}

void Session::submit(std::string_view program) {
  Program& p = impl_->program(program, "Session::submit");
  impl_->finish_pending();
  const std::string missing = p.unset_inputs();
  if (!missing.empty()) throw Error("Session::step: inputs never set: " + missing);
  p.recording->submit();
  p.stepped = true;
  if (p.chain) p.chain->ran_last = false;
  impl_->pending = static_cast<int>(&p - impl_->programs.data());
  impl_->pending_chain = false;
}

namespace {
const std::string& only_program(const std::vector<Program>& programs, const char* what) {
  if (programs.size() != 1) {
    std::string names;
    for (const Program& p : programs) names += (names.empty() ? "" : ", ") + p.name;
    throw Error(std::string(what) + ": the session runs programs " + names + "; name one");
  }
  return programs.front().name;
}

std::vector<std::string> keys(const std::map<std::string, NodeId, std::less<>>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}
}  // namespace

void Session::submit() { submit(only_program(impl_->programs, "Session::submit")); }

void Session::wait() { impl_->finish_pending(); }

void Session::step() { step(only_program(impl_->programs, "Session::step")); }

void Session::step(std::string_view program) {
  submit(program);
  wait();
}

std::vector<std::string> Session::program_names() const {
  std::vector<std::string> out;
  for (const Program& p : impl_->programs) out.push_back(p.name);
  return out;
}

std::vector<std::string> Session::input_names() const {
  return keys(impl_->programs.front().plan.inputs);
}
std::vector<std::string> Session::output_names() const {
  return keys(impl_->programs.front().plan.outputs);
}
std::vector<std::string> Session::input_names(std::string_view program) const {
  return keys(impl_->program(program, "Session::input_names").plan.inputs);
}
std::vector<std::string> Session::output_names(std::string_view program) const {
  return keys(impl_->program(program, "Session::output_names").plan.outputs);
}

namespace {
// Parameters or states of every program, each name once.
std::vector<std::string> persistent_names(const std::vector<Program>& programs, bool states) {
  std::vector<std::string> out;
  for (const Program& p : programs) {
    const Graph& g = p.plan.graph;
    for (NodeId id : states ? g.states() : g.parameters()) {
      const std::string& name = g.node(id).name;
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
  }
  return out;
}
}  // namespace

std::vector<std::string> Session::parameter_names() const {
  return persistent_names(impl_->programs, false);
}
std::vector<std::string> Session::state_names() const {
  return persistent_names(impl_->programs, true);
}
TensorType Session::type_of(std::string_view name) const {
  return impl_->node_named(name, "Session::type_of").type;
}

const std::string& Session::device_name() const { return impl_->device->capabilities().name; }

MemorySummary Session::memory() const {
  MemorySummary m;
  m.arena_bytes = impl_->layout.arena_bytes;
  m.shared_bytes = impl_->layout.shared_bytes;
  m.persistent_bytes = m.shared_bytes;
  std::map<std::string, uint64_t> parameters, states;  // by name: programs share them
  for (size_t i = 0; i < impl_->programs.size(); ++i) {
    const Program& p = impl_->programs[i];
    const plan::MemoryBreakdown b = plan::memory_breakdown(p.plan);
    ProgramMemory pm{p.name,
                     impl_->layout.own_bytes[i],
                     impl_->layout.transient_bytes[i],
                     p.recording->dispatch_count(),
                     p.recording->barrier_count(),
                     b.activation_bytes,
                     b.backward_bytes,
                     b.workspace_bytes};
    for (const plan::PlannedBuffer& buf : p.plan.buffers) {
      if (buf.node < 0) continue;
      const Node& n = p.plan.graph.node(buf.node);
      if (n.op_name() == "parameter") parameters[n.name] = buf.bytes;
      if (n.op_name() == "state") states[n.name] = buf.bytes;
    }
    m.persistent_bytes += pm.own_bytes;
    m.naive_bytes += p.plan.memory.naive_bytes;
    m.tensors += p.plan.buffers.size();
    m.dispatches += pm.dispatches;
    m.barriers += pm.barriers;
    m.programs.push_back(std::move(pm));
  }
  for (const auto& [name, bytes] : parameters) m.parameter_bytes += bytes;
  for (const auto& [name, bytes] : states) m.state_bytes += bytes;
  return m;
}

namespace {
// Program p's last step's timings, each with what its launch computes.
// After a chain, the chain's: every run's kernels (without operands, which name the step's).
void profile_of(const Program& p, std::vector<KernelTime>& out) {
  const bool chain = p.chain && p.chain->ran_last;
  const std::vector<vk::OpTiming>& timings = (chain ? p.chain->recording : p.recording)->timings();
  for (size_t i = 0; i < timings.size(); ++i) {
    const vk::OpTiming& t = timings[i];
    const bool operands = !chain && i < p.op_operands.size();
    out.push_back({t.label, t.ms, t.statistics, operands ? p.op_operands[i] : std::string()});
  }
}
}  // namespace

std::vector<KernelTime> Session::profile() const {
  impl_->finish_pending();
  std::vector<KernelTime> out;
  for (const Program& p : impl_->programs) profile_of(p, out);
  return out;
}

std::vector<KernelTime> Session::profile(std::string_view program) const {
  impl_->finish_pending();
  std::vector<KernelTime> out;
  profile_of(impl_->program(program, "Session::profile"), out);
  return out;
}

double Session::step_gpu_ms(std::string_view program) const {
  impl_->finish_pending();
  return impl_->program(program, "Session::step_gpu_ms").recording->total_ms();
}

const Graph& Session::compiled_graph() const { return impl_->programs.front().plan.graph; }

}  // namespace mn

namespace mn {

std::vector<ArenaSpan> SessionAccess::arena_spans(Session& s, std::string_view name) {
  Session::Impl& impl = *s.impl_;
  Program& p = impl.owner(name, "arena_spans");
  auto it = p.plan.persistents.find(name);
  if (it == p.plan.persistents.end()) {
    throw Error("arena_spans: '" + std::string(name) + "' is not a parameter or state");
  }
  impl.finish_pending();
  const Node& n = *p.find(name);
  const uint64_t bytes = static_cast<uint64_t>(n.type.numel()) * dtype_size(n.type.dtype);
  std::vector<ArenaSpan> spans;
  for (const vk::RangePiece& piece : impl.arena->pieces(p.buffer_of(it->second).offset, bytes)) {
    spans.push_back({&impl.arena->chunk(piece.chunk), piece.offset, piece.size});
  }
  return spans;
}

const vk::Device& SessionAccess::device(const Session& s) { return *s.impl_->device; }

}  // namespace mn
