#include "codegen/matmul_epilogue.h"

#include "codegen/glsl.h"

namespace mn::codegen {

std::string epilogue_function(const MatmulEpilogue* e) {
  const std::string body = e && !e->body.empty() ? e->body : "  return acc;\n";
  return "float mm_epilogue(float acc, uint b, uint m, uint n) {\n" + body + "}\n";
}

MatmulEpilogue with_row_bias(const MatmulEpilogue* e, DType bias_dtype, int bias_input) {
  MatmulEpilogue out = e ? *e : MatmulEpilogue{};
  out.declarations +=
      glsl::buffer(static_cast<uint32_t>(3 + out.extra.size()), bias_dtype, "Bias", true);
  // Parameters are local copies in GLSL: the bias is added in place.
  out.body =
      "  acc += Bias_ld(m);\n" + (out.body.empty() ? std::string("  return acc;\n") : out.body);
  out.extra.push_back(ArgRef::input(bias_input));
  return out;
}

}  // namespace mn::codegen
