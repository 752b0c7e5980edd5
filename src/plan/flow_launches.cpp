#include "plan/flow_launches.h"

#include "codegen/flow_kernel.h"

namespace mn::plan {

int make_flow_launches(std::vector<PlannedLaunch>& launches,
                       const std::vector<PlannedBuffer>& buffers) {
  std::vector<char> written(buffers.size(), 0);
  for (const PlannedLaunch& l : launches) {
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (l.kernel.bindings[k].written && l.buffers[k] >= 0) {
        written[static_cast<size_t>(l.buffers[k])] = 1;
      }
    }
  }
  int made = 0;
  for (PlannedLaunch& l : launches) {
    codegen::FlowOptions fo;
    fo.bindings = static_cast<uint32_t>(l.kernel.bindings.size());
    fo.coherent.assign(l.buffers.size(), 0);
    const auto& g = l.kernel.groups;
    const auto& w = l.kernel.workgroup;
    fo.invocations = uint64_t{g[0]} * g[1] * g[2] * w[0] * w[1] * w[2];
    // Tensor-core kernels keep every register for their tiles, and hide their loads in their K
    // loops: no prefetch there.
    const bool prefetching = !l.kernel.coop_khr && !l.kernel.current_compiler;
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const int b = l.buffers[k];
      // Temporaries share memory with other buffers (the memory plan): coherent as well.
      const bool stays =
          b >= 0 && !written[static_cast<size_t>(b)] && buffers[static_cast<size_t>(b)].persistent;
      fo.coherent[k] = !stays;
      const uint64_t bytes = b >= 0 ? buffers[static_cast<size_t>(b)].bytes : 0;
      if (stays && prefetching && bytes >= kFlowPrefetchMinBytes) {
        fo.prefetch.push_back({static_cast<uint32_t>(k), bytes});
      }
    }
    std::optional<std::string> flow = codegen::flow_kernel(l.kernel.glsl, fo);
    if (!flow) continue;
    l.kernel.glsl = std::move(*flow);
    l.kernel.flow = true;
    ++made;
  }
  return made;
}

}  // namespace mn::plan
