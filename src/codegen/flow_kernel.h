#pragma once
// Kernels that order themselves after the launches they depend on (plan/flow_launches.h): a
// flow kernel is a kernel's own text with its main() wrapped. Before the kernel's body, one
// invocation of each workgroup waits until the counters of the launches it depends on reach
// their workgroup counts; after it, each workgroup adds one to its own launch's counter. A
// recording then places no barrier between flow launches (vulkan/recording.h): the driver may
// start a launch while those it depends on still run, and a dependent window costs the counters'
// round trip instead of a barrier's drain and refill.
//
// Two bindings follow the kernel's own: its record (words: own counter, error counter, wait
// count, then a counter and its target per wait, written by the recording) and the counters
// (zeroed by each submission). A wait that spins kFlowSpinLimit times gives up and sets the
// error counter, so that a driver which never runs the producer beside its waiting consumer
// cannot hang the device: the step is then reported as an error.
//
// Buffers the program writes are declared coherent: a launch may read what one running beside
// it wrote, and without a barrier no cache between them is flushed. Buffers it only reads keep
// their declarations.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mn::codegen {

inline constexpr uint32_t kFlowSpinLimit = 1u << 22;
// Words of a record before its waits: own counter, error counter, number of waits.
inline constexpr uint32_t kFlowRecordHeader = 3;

// The flow form of `glsl`, a kernel with `bindings` bindings (0 .. bindings - 1); binding i is
// declared coherent where coherent[i] is set. nullopt where the text has no single `void main()`
// or declares a binding the recording could not see.
std::optional<std::string> flow_kernel(std::string_view glsl, uint32_t bindings,
                                       const std::vector<char>& coherent);

}  // namespace mn::codegen
