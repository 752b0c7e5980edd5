// Chains of a program's runs in one submission: checked and sized when the session is built,
// recorded after its step, and run through Session::set_runs, step_chain and get_runs.
#include "runtime/program_chain.h"

#include <algorithm>
#include <set>

#include <meganeura/error.h>

#include "runtime/host_tensor.h"
#include "runtime/record_step.h"

namespace mn::runtime {

namespace {
// Where the host maps the arena (resizable BAR, unified memory), the per-run values and the
// collected outputs live in device memory it maps too, so that the chain's copies between runs
// stay on the device rather than crossing the bus at every run; host memory otherwise, or where
// that memory is used up.
std::unique_ptr<vk::Buffer> chain_buffer(vk::Device& dev, uint64_t bytes, bool readback,
                                         bool device_memory) {
  if (device_memory) {
    try {
      return std::make_unique<vk::Buffer>(
          dev, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
          vk::MemoryKind::device_local_mappable);
    } catch (const DeviceError&) {  // NOLINT(bugprone-empty-catch): host memory below
    }
  }
  return std::make_unique<vk::StagingBuffer>(dev, bytes, readback);
}
}  // namespace

void build_chain(vk::Device& dev, Program& p, const ProgramChain& spec, bool device_memory) {
  if (spec.runs == 0 && spec.per_run.empty() && spec.feed.empty() && spec.collect.empty()) return;
  const std::string who = "build_session: program '" + p.name + "''s chain";
  if (spec.runs < 1) {
    throw Error(who + " needs at least 1 run (got " + std::to_string(spec.runs) + ")");
  }
  auto node = [&](std::string_view name, bool input, const char* role) -> const Node& {
    const auto& names = input ? p.plan.inputs : p.plan.outputs;
    auto it = names.find(name);
    if (it == names.end()) {
      throw Error(who + " names '" + std::string(name) + "' " + role + ", which is not " +
                  (input ? "an input" : "an output") + " of the program");
    }
    return p.plan.graph.node(it->second);
  };
  Program::Chain c;
  c.spec = spec;
  uint64_t up = 0, down = 0;
  // Each tensor's block of `runs` values at the next 16-byte boundary of its buffer.
  auto place = [runs = static_cast<uint64_t>(spec.runs)](const Node& n, uint64_t& end) {
    const uint64_t at = end;
    end += (runs * static_cast<uint64_t>(n.type.numel()) * dtype_size(n.type.dtype) + 15) / 16 * 16;
    return at;
  };
  for (const std::string& name : spec.per_run) {
    const Node& n = node(name, true, "per run");
    if (c.per_run_offset.count(name)) throw Error(who + " names '" + name + "' per run twice");
    c.per_run_offset[name] = place(n, up);
  }
  std::set<std::string, std::less<>> fed;
  for (const auto& [out, in] : spec.feed) {
    const Node& o = node(out, false, "as a feed's source");
    const Node& i = node(in, true, "as a feed's destination");
    if (o.type.dtype != i.type.dtype || o.type.numel() != i.type.numel()) {
      throw Error(who + " feeds output '" + out + "' (" + o.type.str() + ") to input '" + in +
                  "' (" + i.type.str() + "): they need the same dtype and element count");
    }
    if (c.per_run_offset.count(in) || !fed.insert(in).second) {
      throw Error(who + " sets input '" + in + "' twice (fed and per run, or fed twice)");
    }
  }
  for (const std::string& name : spec.collect) {
    const Node& n = node(name, false, "as collected");
    if (c.collect_offset.count(name)) throw Error(who + " collects '" + name + "' twice");
    c.collect_offset[name] = place(n, down);
  }
  c.per_run = chain_buffer(dev, std::max<uint64_t>(up, 16), false, device_memory);
  c.collected = chain_buffer(dev, std::max<uint64_t>(down, 16), true, device_memory);
  p.chain = std::move(c);
}

// The chain: the step's uploads, then per run its per-run values, the kernels, the feeds to the
// next run and the collected outputs; the step's readbacks after the last run.
void record_chain(Session::Impl& impl, Program& prog, const SessionOptions& options) {
  Program::Chain& c = *prog.chain;
  c.recording = std::make_unique<vk::Recording>(*impl.device,
                                                recording_options(prog.name + " chain", options));
  vk::Recording& rec = *c.recording;
  record_uploads(impl, prog, rec);
  for (int64_t r = 0; r < c.spec.runs; ++r) {
    for (const auto& [name, offset] : c.per_run_offset) {
      const vk::Range to = tensor_range(impl, prog, name);
      rec.upload(*c.per_run, offset + static_cast<uint64_t>(r) * to.size, to);
    }
    record_run(impl, prog, rec, options, false);
    if (r + 1 < c.spec.runs) {
      for (const auto& [out, in] : c.spec.feed) {
        rec.copy(tensor_range(impl, prog, out), tensor_range(impl, prog, in));
      }
    }
    for (const auto& [name, offset] : c.collect_offset) {
      const vk::Range from = tensor_range(impl, prog, name);
      rec.download(from, *c.collected, offset + static_cast<uint64_t>(r) * from.size);
    }
  }
  record_downloads(impl, prog, rec);
  rec.finish();
}

}  // namespace mn::runtime

namespace mn {

namespace {
// A program that has a chain; mn::Error (starting with `what`) otherwise.
Program& chained_program(Session::Impl& impl, std::string_view program, const char* what) {
  Program& p = impl.program(program, what);
  if (!p.chain) {
    throw Error(std::string(what) + ": program '" + p.name +
                "' has no chain (SessionProgram::chain)");
  }
  return p;
}

// A per-run input's or collected output's node, by the chain's list it must be in.
const Node& chain_node(const Program& p, const std::map<std::string, uint64_t, std::less<>>& list,
                       std::string_view name, const char* what, const char* role) {
  if (!list.count(name)) {
    std::string names;
    for (const auto& [n, offset] : list) names += (names.empty() ? "" : ", ") + n;
    throw Error(std::string(what) + ": program '" + p.name + "''s chain has no " + role +
                " named '" + std::string(name) + "' (" + (names.empty() ? "none" : names) + ")");
  }
  return *p.find(name);
}

Shape with_runs(int64_t runs, const Shape& shape) {
  Shape s{runs};
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}
}  // namespace

void Session::set_runs(std::string_view program, std::string_view input, const Array& values) {
  const char* what = "Session::set_runs";
  Program& p = chained_program(*impl_, program, what);
  Program::Chain& c = *p.chain;
  const Node& n = chain_node(p, c.per_run_offset, input, what, "per-run input");
  const Shape shape = with_runs(c.spec.runs, n.type.shape);
  if (values.shape != shape) {
    throw ShapeError(std::string(what) + " '" + std::string(input) + "': expected shape " +
                     shape_str(shape) + " (" + std::to_string(c.spec.runs) + " runs of " +
                     n.type.str() + "), got " + shape_str(values.shape));
  }
  impl_->finish_pending();
  c.per_run->write(c.per_run_offset.find(input)->second, host_bytes(values, n.type.dtype));
  c.per_run_set[std::string(input)] = true;
}

void Session::step_chain(std::string_view program) {
  const char* what = "Session::step_chain";
  Program& p = chained_program(*impl_, program, what);
  Program::Chain& c = *p.chain;
  impl_->finish_pending();
  std::string missing = p.unset_inputs(c.per_run_offset);
  for (const auto& [name, offset] : c.per_run_offset) {
    if (!c.per_run_set[name]) missing += (missing.empty() ? "" : ", ") + name + " (per run)";
  }
  if (!missing.empty()) throw Error(std::string(what) + ": inputs never set: " + missing);
  c.recording->submit();
  // The fed and per-run inputs' buffers now hold what the last run read where the host maps
  // the arena, the host's values where it uploads them: either way they are set again first.
  for (const auto& [out, in] : c.spec.feed) p.input_set[in] = false;
  for (const auto& [name, offset] : c.per_run_offset) p.input_set[name] = false;
  p.stepped = c.ran = c.ran_last = true;
  impl_->pending = static_cast<int>(&p - impl_->programs.data());
  impl_->pending_chain = true;
  impl_->finish_pending();
}

Array Session::get_runs(std::string_view program, std::string_view output) const {
  const char* what = "Session::get_runs";
  const Program& p = chained_program(*impl_, program, what);
  const Program::Chain& c = *p.chain;
  const Node& n = chain_node(p, c.collect_offset, output, what, "collected output");
  if (!c.ran) {
    throw Error(std::string(what) + " '" + std::string(output) + "': program '" + p.name +
                "''s chain has not run yet");
  }
  impl_->finish_pending();
  const auto count = static_cast<size_t>(c.spec.runs * n.type.numel());
  std::vector<std::byte> bytes(count * dtype_size(n.type.dtype));
  c.collected->read(c.collect_offset.find(output)->second, bytes);
  return Array(with_runs(c.spec.runs, n.type.shape), n.type.dtype,
               runtime::decode(bytes, n.type.dtype, count));
}

int64_t Session::chain_runs(std::string_view program) const {
  const Program& p = impl_->program(program, "Session::chain_runs");
  return p.chain ? p.chain->spec.runs : 0;
}

double Session::chain_gpu_ms(std::string_view program) const {
  impl_->finish_pending();
  return chained_program(*impl_, program, "Session::chain_gpu_ms").chain->recording->total_ms();
}

}  // namespace mn
