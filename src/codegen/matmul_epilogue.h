#pragma once
// Pointwise work fused into the store of a matmul (or an implicit-GEMM convolution): bias,
// activation, residual add, gradient accumulation. Every matmul kernel variant (scalar tiled,
// GEMV, cooperative-matrix) stores its result through `mm_epilogue`, so the scheduler can fuse
// a consumer into whichever kernel the shape and device select.
//
// A conv2d forward (codegen/lower_conv.h) takes the same hook, its output [N, O, OH, OW]
// viewed as the batched product it is: (b, m, n) = (image, output channel, output pixel
// oh·OW + ow), so the flat output index is b·O·OH·OW + m·OH·OW + n on both of its kernels (the
// implicit GEMM and, for 1×1 convolutions, the matmul). `acc` includes the conv's bias.
#include <string>
#include <vector>

#include "codegen/kernel.h"

namespace mn::codegen {

struct MatmulEpilogue {
  // GLSL declarations placed before main(): storage buffers for `extra`, bound at binding 3,
  // 4, ... (after A, B and C), and any helper functions.
  std::string declarations;
  // GLSL body of `float mm_epilogue(float acc, uint b, uint m, uint n)`: the value stored at
  // output batch b, row m, column n, given the accumulated product `acc`. Empty: identity.
  std::string body;
  // Operands the epilogue reads (binding 3 + i). ArgRef::output(j > 0) entries are further
  // outputs the body stores itself (the planner binds them as written); mm_epilogue is called
  // once per output element, only for elements in bounds.
  std::vector<ArgRef> extra;
};

// The complete definition of mm_epilogue for a shader (identity when `e` is null or empty).
std::string epilogue_function(const MatmulEpilogue* e);

// `e` (may be null) applied after adding bias[m] (the kernel's input `bias_input`, bound after
// e's own operands): `acc` includes the bias when e's body runs.
MatmulEpilogue with_row_bias(const MatmulEpilogue* e, DType bias_dtype, int bias_input);

}  // namespace mn::codegen
