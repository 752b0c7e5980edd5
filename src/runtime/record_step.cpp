// A program's step recorded once: uploads, kernels, assignment copies, readbacks.
#include "runtime/record_step.h"

#include <cstdlib>

#include <meganeura/error.h>

#include "codegen/index_check.h"
#include "ir/op_def.h"

namespace mn::runtime {

namespace {

// An input binding the kernel also writes is an in-place update: it reads the old value first.
vk::Access access_of(const codegen::KernelBinding& b) {
  if (!b.written) return vk::Access::read;
  return b.arg.kind == codegen::ArgRef::Kind::input ? vk::Access::read_write : vk::Access::write;
}

// What launch `l` computes, for profiles (KernelTime::operands).
std::string launch_operands(const plan::StepPlan& p, const plan::PlannedLaunch& l) {
  if (l.node < 0 || l.group < 0) return {};
  const Node& n = p.graph.node(l.node);
  std::string s = std::string(n.op_name()) + "(" + n.type.str() + ") <-";
  const std::vector<NodeId>& inputs = p.groups[static_cast<size_t>(l.group)].inputs;
  constexpr size_t kShown = 6;  // a fused optimizer update reads dozens
  for (size_t i = 0; i < std::min(inputs.size(), kShown); ++i) {
    s += " " + p.graph.node(inputs[i]).type.str();
  }
  if (inputs.size() > kShown) s += " and " + std::to_string(inputs.size() - kShown) + " more";
  return s;
}

vk::Range buffer_range(const Session::Impl& impl, const plan::StepPlan& p, int buffer) {
  const plan::PlannedBuffer& b = p.buffers[static_cast<size_t>(buffer)];
  return impl.arena->range(b.offset, b.bytes);
}

}  // namespace

vk::RecordingOptions recording_options(const std::string& label, const SessionOptions& options) {
  vk::RecordingOptions ro;
  ro.timestamps = options.profile;
  ro.total_time = options.time_steps;
  // MN_FENCE_SPIN_US: how long the wait for a step polls before blocking (0: blocks at once).
  if (const char* spin = std::getenv("MN_FENCE_SPIN_US")) {
    char* end = nullptr;
    const unsigned long us = std::strtoul(spin, &end, 10);
    if (!*spin || *end || us > 1000000) {
      throw Error(std::string("MN_FENCE_SPIN_US must be a whole number of microseconds up to ") +
                  "1000000, got '" + spin + "'");
    }
    ro.spin_wait_us = static_cast<uint32_t>(us);
  }
  ro.label = label;
  return ro;
}

// The bytes of a named tensor's value in the arena (its buffer may be longer).
vk::Range tensor_range(const Session::Impl& impl, const Program& prog, std::string_view name) {
  const NodeId id = prog.id_of(name);
  const Node& n = prog.plan.graph.node(id);
  return impl.arena->range(prog.buffer_of(id).offset,
                           static_cast<uint64_t>(n.type.numel()) * dtype_size(n.type.dtype));
}

// Inputs from the staging buffer, where the host does not write the arena itself.
void record_uploads(const Session::Impl& impl, const Program& prog, vk::Recording& rec) {
  const plan::StepPlan& p = prog.plan;
  for (const auto& [name, offset] : prog.upload_offset) {
    rec.upload(*prog.upload, offset,
               buffer_range(impl, p, p.node_buffer[p.inputs.find(name)->second]));
  }
}

// One run of the program: its kernels (numerics probes and poisoning as the options ask) and
// its assignment copies. `operands`: KernelTime::operands of each operation, for profiles.
void record_run(const Session::Impl& impl, Program& prog, vk::Recording& rec,
                const SessionOptions& options, bool operands) {
  const plan::StepPlan& p = prog.plan;
  const vk::Arena& arena = *impl.arena;
  auto range_of = [&](int buffer) { return buffer_range(impl, p, buffer); };
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
    d.pipeline = impl.pipelines.at(l.kernel.glsl).get();
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const bool slot = l.kernel.bindings[k].arg.kind == codegen::ArgRef::Kind::index_errors;
      d.buffers.push_back({slot ? arena.range(p.index_region.slot_offset(p.buffers, l.index_slot),
                                              codegen::kIndexSlotBytes)
                                : range_of(l.buffers[k]),
                           access_of(l.kernel.bindings[k])});
    }
    d.groups = l.kernel.groups;
    d.label = l.kernel.name;
    if (options.profile && operands) {  // only a profile reads them
      prog.op_operands.resize(rec.operation_count() + 1);
      prog.op_operands.back() = launch_operands(p, l);
    }
    rec.dispatch(std::move(d));
    if (prog.numerics) {  // copied before a later kernel may reuse the bytes
      for (const runtime::NumericsProbe& probe : prog.numerics->probes) {
        if (probe.launch != li) continue;
        rec.download(range_of(probe.buffer), *prog.numerics->staging, probe.staging_offset);
      }
    }
    for (int b : dead_after[li]) {
      const plan::PlannedBuffer& buf = p.buffers[static_cast<size_t>(b)];
      rec.fill(arena.range(buf.offset, (buf.bytes + 3) / 4 * 4), 0x7fc00000u);  // quiet NaN
    }
  }
  for (const auto& [from, to] : p.assignment_copies) rec.copy(range_of(from), range_of(to));
}

// Outputs to the readback buffer (where the host does not read the arena itself), and the
// index checks' slots.
void record_downloads(const Session::Impl& impl, const Program& prog, vk::Recording& rec) {
  const plan::StepPlan& p = prog.plan;
  for (const auto& [name, offset] : prog.readback_offset) {
    rec.download(buffer_range(impl, p, p.node_buffer[p.outputs.find(name)->second]), *prog.readback,
                 offset);
  }
  if (prog.index_slots) prog.index_slots->record_downloads(rec, p);
}

// The step: uploads, kernels, assignment copies, readbacks.
void record_step(Session::Impl& impl, Program& prog, const SessionOptions& options) {
  prog.recording =
      std::make_unique<vk::Recording>(*impl.device, recording_options(prog.name, options));
  vk::Recording& rec = *prog.recording;
  record_uploads(impl, prog, rec);
  record_run(impl, prog, rec, options, true);
  record_downloads(impl, prog, rec);
  rec.finish();
}

}  // namespace mn::runtime
