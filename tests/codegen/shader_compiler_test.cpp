#include <gtest/gtest.h>

#include "codegen/shader/shader_compiler.h"

namespace mn::codegen {
namespace {

constexpr uint32_t kSpirvMagic = 0x07230203;

constexpr const char* kScale = R"(#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { float b[]; };
void main() { b[gl_GlobalInvocationID.x] *= SCALE; }
)";

TEST(ShaderCompiler, CompilesWithMacros) {
  CompileOptions options;
  options.macros = {{"SCALE", "2.0"}};
  const auto spirv = compile_glsl(kScale, options);
  ASSERT_GT(spirv.size(), 5u);
  EXPECT_EQ(spirv[0], kSpirvMagic);
  EXPECT_EQ(spirv[1], 0x00010500u);  // Vulkan 1.2 -> SPIR-V 1.5

  options.target = TargetEnv::vulkan_1_3;
  EXPECT_EQ(compile_glsl(kScale, options)[1], 0x00010600u);

  // Without the macro SCALE is undeclared.
  EXPECT_THROW(compile_glsl(kScale, CompileOptions{}), ShaderCompileError);
}

TEST(ShaderCompiler, OptimizationChangesTheBinary) {
  CompileOptions fast;
  fast.macros = {{"SCALE", "(1.0 + 1.0)"}};
  CompileOptions plain = fast;
  plain.optimize = false;
  EXPECT_NE(compile_glsl(kScale, fast), compile_glsl(kScale, plain));
}

TEST(ShaderCompiler, ErrorReportsTheLineAndTheSource) {
  constexpr const char* kBroken = R"(#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer B { float b[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  float unused = 1.0;
  b[i] = undeclared_value * 2.0;
}
)";
  CompileOptions options;
  options.name = "broken_kernel";
  try {
    compile_glsl(kBroken, options);
    FAIL() << "compiled";
  } catch (const ShaderCompileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.lines(), std::vector<int>{7});
    EXPECT_NE(what.find("broken_kernel:7:"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_value"), std::string::npos) << what;
    EXPECT_NE(what.find(">    7 |   b[i] = undeclared_value * 2.0;"), std::string::npos) << what;
    EXPECT_NE(what.find("     1 | #version 450"), std::string::npos) << what;
  }
}

TEST(ShaderCompiler, LongSourcesShowContextAroundErrors) {
  std::string source = "#version 450\nlayout(local_size_x = 1) in;\n";
  for (int i = 0; i < 300; ++i) source += "// filler line " + std::to_string(i) + "\n";
  source += "void main() { int x = missing; }\n";  // line 303
  try {
    compile_glsl(source, CompileOptions{});
    FAIL() << "compiled";
  } catch (const ShaderCompileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.lines(), std::vector<int>{303});
    EXPECT_NE(what.find(">  303 | void main()"), std::string::npos) << what;
    EXPECT_NE(what.find("  298 | "), std::string::npos);
    EXPECT_EQ(what.find("    10 | "), std::string::npos);  // far from the error: left out
    EXPECT_NE(what.find("..."), std::string::npos);
  }
}

// Debian's glslang 12 knows the NV cooperative-matrix extension (not yet the KHR one).
TEST(ShaderCompiler, CooperativeMatrixNv) {
  constexpr const char* kCoopmat = R"(#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) readonly buffer A { float16_t a[]; };
layout(set = 0, binding = 1) buffer C { float c[]; };
void main() {
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> m;
  coopMatLoadNV(m, a, 0, 16, false);
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  acc = coopMatMulAddNV(m, m, acc);
  coopMatStoreNV(acc, c, 0, 16, false);
}
)";
  for (TargetEnv target : {TargetEnv::vulkan_1_2, TargetEnv::vulkan_1_3}) {
    CompileOptions options;
    options.target = target;
    const auto spirv = compile_glsl(kCoopmat, options);
    ASSERT_GT(spirv.size(), 5u);
    // OpCapability CooperativeMatrixNV (5357) is declared.
    bool found = false;
    for (size_t i = 5; i + 1 < spirv.size(); ++i) {
      if (spirv[i] == ((2u << 16) | 17u) && spirv[i + 1] == 5357u) found = true;
    }
    EXPECT_TRUE(found);
  }
}

TEST(ShaderCompiler, TargetFollowsTheDevice) {
  EXPECT_EQ(target_env_for((1u << 22) | (2u << 12)), TargetEnv::vulkan_1_2);
  EXPECT_EQ(target_env_for((1u << 22) | (3u << 12) | 230), TargetEnv::vulkan_1_3);
  EXPECT_EQ(target_env_for((1u << 22) | (4u << 12)), TargetEnv::vulkan_1_3);
  EXPECT_NE(compiler_version().find("glslang-12"), std::string::npos) << compiler_version();
}

}  // namespace
}  // namespace mn::codegen
