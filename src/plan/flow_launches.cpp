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
    // Temporaries share memory with other buffers (the memory plan): coherent as well.
    std::vector<char> coherent(l.buffers.size(), 0);
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const int b = l.buffers[k];
      coherent[k] =
          b < 0 || written[static_cast<size_t>(b)] || !buffers[static_cast<size_t>(b)].persistent;
    }
    const auto bindings = static_cast<uint32_t>(l.kernel.bindings.size());
    std::optional<std::string> flow = codegen::flow_kernel(l.kernel.glsl, bindings, coherent);
    if (!flow) continue;
    l.kernel.glsl = std::move(*flow);
    l.kernel.flow = true;
    ++made;
  }
  return made;
}

}  // namespace mn::plan
