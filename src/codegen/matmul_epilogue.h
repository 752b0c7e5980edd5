#pragma once
// Pointwise work fused into the store of a matmul (or an implicit-GEMM convolution): bias,
// activation, residual add, gradient accumulation. Every matmul kernel variant (scalar tiled,
// GEMV, cooperative-matrix) stores its result through `mm_epilogue`, so the scheduler can fuse
// a consumer into whichever kernel the shape and device select.
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

}  // namespace mn::codegen
