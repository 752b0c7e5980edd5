#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

std::string epilogue_function(const MatmulEpilogue* e) {
  const std::string body = e && !e->body.empty() ? e->body : "  return acc;\n";
  return "float mm_epilogue(float acc, uint b, uint m, uint n) {\n" + body + "}\n";
}

}  // namespace mn::codegen
