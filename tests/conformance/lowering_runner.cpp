#include "lowering_runner.h"

#include <map>
#include <memory>

#include <meganeura/error.h>

#include "codegen/shader/shader_compiler.h"
#include "runtime/device_pool.h"
#include "runtime/plan_options.h"
#include "runtime/run_lowering.h"
#include "vulkan/device.h"

namespace mn::testing {

namespace {

std::shared_ptr<vk::Device> device() { return runtime::shared_device("", std::nullopt); }

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

  const std::shared_ptr<vk::Device> held = device();
  std::vector<std::vector<double>> operands;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    operands.push_back(inputs[i].data);
    dtypes.push_back(g.node(n.inputs[i]).type.dtype);
  }
  codegen::CompileOptions co;
  co.target = codegen::target_env_for(held->capabilities().api_version);
  return Array(
      n.type.shape, n.type.dtype,
      runtime::run_lowering(*held, low, operands, dtypes, n.type.numel(), n.type.dtype, co));
}

}  // namespace mn::testing
