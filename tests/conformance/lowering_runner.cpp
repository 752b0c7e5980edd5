#include "lowering_runner.h"

#include <map>
#include <memory>

#include <meganeura/error.h>

#include "codegen/shader_compiler.h"
#include "plan/step_plan.h"
#include "runtime/device_pool.h"
#include "runtime/host_tensor.h"
#include "runtime/plan_options.h"
#include "vulkan/arena.h"
#include "vulkan/device.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn::testing {

namespace {

std::shared_ptr<vk::Device> device() { return runtime::shared_device("", std::nullopt); }

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

// The device's traits as sessions see them, without the cooperative-matrix self-test (the
// harness runs one lowering at a time and compares it with the reference).
codegen::DeviceTraits device_traits() { return runtime::device_traits(device()->capabilities()); }

codegen::Lowering lower_node(const Graph& g, NodeId id, const codegen::DeviceTraits& traits) {
  const Node& n = g.node(id);
  const codegen::LowerFn* fn = codegen::find_lowering(n.op_name());
  if (!fn) throw Error("no GPU lowering for " + std::string(n.op_name()));
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  return (*fn)(codegen::LowerContext{n, types, traits});
}

Array run_lowering(const Graph& g, NodeId id, const std::vector<Array>& inputs,
                   const codegen::DeviceTraits& traits) {
  const Node& n = g.node(id);
  if (inputs.size() != n.inputs.size()) throw Error("run_lowering: wrong number of inputs");
  const codegen::Lowering low = lower_node(g, id, traits);
  if (low.alias_input0) return Array(n.type.shape, n.type.dtype, inputs[0].data);

  const std::shared_ptr<vk::Device> held = device();  // the pool keeps devices only while held
  vk::Device& dev = *held;
  const uint64_t align =
      std::max<uint64_t>(256, dev.capabilities().buffers.min_storage_buffer_offset_alignment);
  // Placement: inputs, output, scratch, each aligned.
  std::vector<std::pair<uint64_t, uint64_t>> input_at, scratch_at;
  uint64_t end = 0;
  auto place = [&](uint64_t bytes) {
    const uint64_t at = end;
    end = round_up(at + std::max<uint64_t>(bytes, 4), align);
    return std::pair{at, std::max<uint64_t>(bytes, 4)};
  };
  for (const Array& a : inputs) input_at.push_back(place(plan::device_bytes(a.type())));
  const auto output_at = place(plan::device_bytes(n.type));
  for (uint64_t bytes : low.scratch_bytes) scratch_at.push_back(place(bytes));
  vk::Arena arena(dev, end);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType t = g.node(n.inputs[i]).type.dtype;
    std::vector<std::byte> bytes(inputs[i].data.size() * dtype_size(t));
    runtime::encode(std::span<const double>(inputs[i].data), t, bytes);
    arena.write(input_at[i].first, bytes);
  }

  codegen::CompileOptions co;
  co.target = codegen::target_env_for(dev.capabilities().api_version);
  std::vector<std::unique_ptr<vk::Pipeline>> pipelines;
  vk::Recording rec(dev, {false, "lowering"});
  for (const codegen::KernelLaunch& k : low.launches) {
    co.name = k.name;
    vk::KernelInterface ki;
    ki.buffer_count = static_cast<uint32_t>(k.bindings.size());
    ki.workgroup_size = k.workgroup;
    pipelines.push_back(
        std::make_unique<vk::Pipeline>(dev, codegen::compile_glsl(k.glsl, co), ki, k.name));
    vk::Dispatch d;
    d.pipeline = pipelines.back().get();
    for (const codegen::KernelBinding& b : k.bindings) {
      std::pair<uint64_t, uint64_t> at;
      switch (b.arg.kind) {
        case codegen::ArgRef::Kind::input:
          at = input_at.at(static_cast<size_t>(b.arg.index));
          break;
        case codegen::ArgRef::Kind::output:
          at = output_at;
          break;
        case codegen::ArgRef::Kind::scratch:
          at = scratch_at.at(static_cast<size_t>(b.arg.index));
          break;
      }
      d.buffers.push_back({arena.range(at.first, at.second),
                           b.written ? vk::Access::read_write : vk::Access::read});
    }
    d.groups = k.groups;
    d.label = k.name;
    rec.dispatch(std::move(d));
  }
  rec.run();
  dev.check_validation("run_lowering");
  std::vector<std::byte> bytes(static_cast<size_t>(n.type.numel()) * dtype_size(n.type.dtype));
  arena.read(output_at.first, bytes);
  return Array(n.type.shape, n.type.dtype,
               runtime::decode(bytes, n.type.dtype, static_cast<size_t>(n.type.numel())));
}

}  // namespace mn::testing
