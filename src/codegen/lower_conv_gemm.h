#pragma once
// The implicit-GEMM skeleton of the convolution kernels: C[g] = A[g] · B[g] for each group g,
// with A (M×K) and B (K×N) never materialized. The op lowerings describe how to read one element
// of each operand (the im2col index, computed on the fly while tiles are loaded into shared
// memory) and how to store one element of C (the epilogue: layout, bias).
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel.h"

namespace mn::codegen {

struct ImplicitGemm {
  std::string name;  // kernel name prefix, e.g. "conv2d"
  int64_t m = 1, n = 1, k = 1, groups = 1;
  // Load layouts: true when consecutive K indices are adjacent in memory (threads then walk K),
  // false when consecutive M (for A) or N (for B) indices are.
  bool a_k_fast = false, b_k_fast = true;
  // Epilogue thread mapping: true when consecutive N indices of C are adjacent in memory.
  bool c_n_fast = false;
  // Buffer declarations (bindings 0..bindings.size()-1) and helper functions.
  std::string declarations;
  // Bodies of `float a_at(uint g, uint m, uint k)`, `float b_at(uint g, uint k, uint n)` (called
  // with m < M, n < N, k < K only) and `void c_store(uint g, uint m, uint n, float v)`.
  std::string a_at, b_at, c_store;
  std::vector<KernelBinding> bindings;
  // The buffer each operand's values are read from (a name declared in `declarations`, read
  // as <name>_ld, and its element count), when there is one: the tensor-core path
  // (codegen/lower_conv_gemm_coop.h) then takes the operand's scale from the buffer's largest
  // magnitude instead of evaluating a_at or b_at over the whole operand. Empty: evaluate.
  std::string a_source, b_source;
  int64_t a_source_count = 0, b_source_count = 0;
  // K may be split across workgroups (partial tiles summed by a second deterministic launch) when
  // the M×N tiles alone cannot fill the device.
  bool split_k = false;
  // The largest 1/M + 1/N (packed operand elements per multiply-add) at which the packed
  // tensor-core path (codegen/lower_conv_gemm_coop.h) still beats this GEMM's portable kernel;
  // 0: that path's default, measured on forward convolutions.
  double coop_max_pack_per_mac = 0;
  // Where the packed path declines, the staged kernel (codegen/lower_conv_gemm_staged.h) runs
  // this GEMM even unasked (MN_CONV_STAGED): set where it was measured faster than the portable
  // kernel (1×1 convolutions' wide GEMMs, docs/perf.md).
  bool staged_when_unpacked = false;
};

Lowering lower_implicit_gemm(const ImplicitGemm& spec, const DeviceTraits& device);

// GLSL of the spec's a_at, b_at and c_store functions (after its declarations).
std::string implicit_gemm_functions(const ImplicitGemm& spec);
// The launch that sums `splits` partial products of K splits and stores them through c_store:
// `partials` (f32, bound after the spec's bindings) holds split s's C[g] (M×N, row-major) at
// (s · groups + g) · M·N. The sum runs in split order, so it is deterministic.
KernelLaunch implicit_gemm_split_sum(const ImplicitGemm& spec, int64_t splits, ArgRef partials,
                                     const DeviceTraits& device);

}  // namespace mn::codegen
