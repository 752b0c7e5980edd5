#pragma once
// The current shader toolchain in the kernel tests: the current glslang (kernels with
// GL_NV_cooperative_matrix2 or bf16 matrices) and spirv-val / spirv-dis 2025.5.
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/kernel.h"
#include "codegen/shader/current_glslang.h"
#include "codegen/shader/shader_compiler.h"
#include "support/spirv_val.h"

// Skips the test where the build lacks the current glslang or spirv-val.
#define REQUIRE_CURRENT_TOOLCHAIN()                                                        \
  do {                                                                                     \
    if (!::mn::codegen::current_glslang().available) {                                     \
      GTEST_SKIP() << ::mn::codegen::current_glslang().status;                             \
    }                                                                                      \
    if (::mn::test::spirv_val_path().empty()) GTEST_SKIP() << "no spirv-val in the build"; \
  } while (0)

namespace mn::codegen::testing {

// `glsl` compiled by the current glslang for Vulkan 1.3.
inline std::vector<uint32_t> compile_current(const std::string& glsl, const std::string& name) {
  CompileOptions co;
  co.compiler = GlslCompiler::current;
  co.target = TargetEnv::vulkan_1_3;
  co.name = name;
  return compile_glsl(glsl, co);
}

// A kernel compiled by the current glslang: spirv-val's messages (empty when valid) and the
// module's disassembly.
struct ValidatedKernel {
  std::string errors, disassembly;
};

inline ValidatedKernel validate_current(const KernelLaunch& k) {
  const std::vector<uint32_t> spirv = compile_current(k.glsl, k.name);
  return {test::spirv_val_errors(spirv), test::spirv_dis(spirv)};
}

}  // namespace mn::codegen::testing
