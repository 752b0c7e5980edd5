#pragma once
// Shared pieces of the pooling and resampling lowerings (lower_pool.cpp,
// lower_pool_resample.cpp): every kernel runs one thread per output element of the node.
#include <string>
#include <vector>

#include "codegen/glsl.h"
#include "codegen/kernel.h"

namespace mn::codegen::pool {

// The node's input 0 and output as stacks of H×W planes.
struct Planes {
  int64_t planes = 1, in_h = 1, in_w = 1, out_h = 1, out_w = 1;
};
Planes planes_of(const LowerContext& ctx);

// A launch with one thread per output element: inputs are the buffers X (input 0) and G
// (input 1, when present), the output Y; `functions` precede main, whose `body` sees the plane
// `p` (uint), the output coordinates `oy`, `ox` (int) and the element index `i`.
Lowering per_output_kernel(const LowerContext& ctx, const std::string& functions,
                           const std::string& body);
// The same launch with the caller's buffers: `declarations` (and functions) for `bindings`.
KernelLaunch per_output_launch(const LowerContext& ctx, std::string name,
                               const std::string& declarations, std::vector<KernelBinding> bindings,
                               const std::string& body);

// "123" as a GLSL int literal (glsl::ulit makes "123u").
inline std::string ilit(int64_t v) { return std::to_string(v); }
using glsl::ulit;

void register_resample_lowerings(LoweringRegistry& r);  // lower_pool_resample.cpp

}  // namespace mn::codegen::pool
