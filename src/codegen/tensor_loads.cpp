#include "codegen/tensor_loads.h"

#include <utility>

#include "codegen/glsl.h"
#include "codegen/kernel_template.h"

namespace mn::codegen {
namespace {

const char* glsl_type(DType d) {
  return d == DType::bf16 ? "bfloat16_t" : d == DType::f16 ? "float16_t" : "float";
}

}  // namespace

std::string tensor_operand_loads(uint32_t binding, DType stored, const std::string& name,
                                 DType matrix) {
  const std::string b = std::to_string(binding);
  const std::string elem = glsl_type(stored), target = glsl_type(matrix);
  std::string s = "layout(std430, set = 0, binding = " + b + ") readonly buffer Tensor" + b +
                  " { " + elem + " " + name + "_t[]; };\n";
  for (const bool transposed : {false, true}) {
    const std::string macro = std::string(transposed ? "LOAD_T_" : "LOAD_") + name;
    const std::string view = transposed ? ", transposed" : "";
    if (stored == matrix) {
      s += "#define " + macro + "(m, use, rows, cols, offset, slice) coopMatLoadTensorNV(m, " +
           name + "_t, offset, slice" + view + ")\n";
      continue;
    }
    s += "#define " + macro + "(m, use, rows, cols, offset, slice) { \\\n";
    s += "  coopmat<" + elem +
         ", gl_ScopeWorkgroup, rows, cols, gl_MatrixUseAccumulator> raw_; \\\n";
    s += "  coopMatLoadTensorNV(raw_, " + name + "_t, offset, slice" + view + "); \\\n";
    s += "  ACC(rows, cols) f_ = ACC(rows, cols)(raw_); \\\n";
    if (matrix == DType::bf16) s += "  coopMatPerElementNV(f_, f_, to_bf16); \\\n";
    s += "  m = coopmat<" + target + ", gl_ScopeWorkgroup, rows, cols, use>(f_); }\n";
  }
  return s;
}

std::string tensor_matrix_declarations(std::string declarations, DType matrix) {
  std::string s = glsl::require_extensions(
      std::move(declarations),
      {"GL_EXT_bfloat16", "GL_KHR_memory_scope_semantics", "GL_KHR_cooperative_matrix",
       "GL_NV_cooperative_matrix2", "GL_EXT_control_flow_attributes",
       "GL_EXT_shader_explicit_arithmetic_types_float16",
       "GL_EXT_shader_explicit_arithmetic_types_int32"});
  s += glsl::half_conversions();
  return s + fill_kernel_template("tensor_matrices.comp", {{"ELEM", glsl_type(matrix)}});
}

}  // namespace mn::codegen
