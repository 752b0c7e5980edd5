#include "runtime/numerics_check.h"

#include <meganeura/error.h>

#include <cmath>
#include <cstdlib>

#include "runtime/host_tensor.h"
#include "runtime/node_description.h"
#include "support/env_switch.h"

namespace mn::runtime {

bool check_numerics_from_env() { return support::env_switch("MN_CHECK_NUMERICS", false); }

NumericsCheck plan_numerics_check(vk::Device& device, const plan::StepPlan& plan) {
  NumericsCheck c;
  uint64_t bytes = 0;
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const plan::PlannedLaunch& l = plan.launches[li];
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const plan::PlannedBuffer& b = plan.buffers[static_cast<size_t>(l.buffers[k])];
      if (!l.kernel.bindings[k].written || b.node < 0) continue;
      if (!is_float(plan.graph.node(b.node).type.dtype)) continue;
      c.probes.push_back({li, l.buffers[k], bytes});
      bytes += (b.bytes + 15) / 16 * 16;
    }
  }
  c.staging = std::make_unique<vk::StagingBuffer>(device, std::max<uint64_t>(bytes, 16), true);
  return c;
}

void check_numerics(const NumericsCheck& check, const plan::StepPlan& plan,
                    const std::string& program) {
  std::vector<std::byte> bytes;
  for (const NumericsProbe& probe : check.probes) {
    const plan::PlannedBuffer& b = plan.buffers[static_cast<size_t>(probe.buffer)];
    const TensorType& type = plan.graph.node(b.node).type;
    bytes.resize(static_cast<size_t>(type.numel()) * dtype_size(type.dtype));
    check.staging->read(probe.staging_offset, bytes);
    const std::vector<double> values = decode(bytes, type.dtype, static_cast<size_t>(type.numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isfinite(values[i])) continue;
      const plan::PlannedLaunch& l = plan.launches[probe.launch];
      std::string fused;
      for (NodeId id : l.nodes) {
        if (id != b.node)
          fused += (fused.empty() ? "" : ", ") + std::string(plan.graph.node(id).op_name());
      }
      throw Error("check_numerics: program '" + program + "': " + describe_node(plan, b.node) +
                  " is the first to hold a non-finite value: " + std::to_string(values[i]) +
                  " at element " + std::to_string(i) + ", written by kernel '" + l.kernel.name +
                  "' (dispatch " + std::to_string(probe.launch + 1) + " of " +
                  std::to_string(plan.launches.size()) + ")" +
                  (fused.empty() ? std::string()
                                 : "; the kernel also computes " + fused +
                                       " (MN_NO_OPTIMIZE=1 runs every op as its own kernel)"));
    }
  }
}

}  // namespace mn::runtime
