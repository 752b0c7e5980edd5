#include "codegen/index_check.h"

namespace mn::codegen {

std::string index_slot_glsl(uint32_t binding) {
  return "layout(std430, set = 0, binding = " + std::to_string(binding) +
         ") buffer IndexSlot { uint mn_index_slot[4]; };\n"
         "void mn_bad_index(uint element, int value) {\n"
         "  if (atomicCompSwap(mn_index_slot[0], 0u, 1u) == 0u) {\n"
         "    mn_index_slot[1] = element;\n"
         "    mn_index_slot[2] = uint(value);\n"
         "  }\n"
         "}\n";
}

std::string report_bad_index(const LowerContext& ctx, const std::string& element,
                             const std::string& value, const std::string& condition) {
  if (!ctx.check_indices) return "";
  const std::string call = "mn_bad_index(" + element + ", " + value + ");\n";
  return condition.empty() ? call : "if (" + condition + ") " + call;
}

}  // namespace mn::codegen
