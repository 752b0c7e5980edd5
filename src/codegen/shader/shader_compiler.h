#pragma once
// GLSL compute shaders to SPIR-V, optimized for speed: with shaderc and Debian's glslang 12
// (linked statically), or with the current glslang loaded at run time (current_glslang.h) for
// kernels that use what only it compiles.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/error.h>

namespace mn::codegen {

// The Vulkan version the SPIR-V targets: 1.2 gives SPIR-V 1.5, 1.3 gives SPIR-V 1.6.
// Extensions such as GL_NV_cooperative_matrix work with either.
enum class TargetEnv { vulkan_1_2, vulkan_1_3 };

// The newest target a device of this Vulkan API version accepts (at least 1.2).
TargetEnv target_env_for(uint32_t vulkan_api_version);

struct ShaderMacro {
  std::string name;
  std::string value;  // "#define name value"
};

// Which compiler turns a kernel's GLSL into SPIR-V.
enum class GlslCompiler {
  linked,   // shaderc with glslang 12: every kernel that does not say otherwise
  current,  // glslang 16 (current_glslang.h): GL_NV_cooperative_matrix2 tensor addressing
};

struct CompileOptions {
  std::vector<ShaderMacro> macros;
  GlslCompiler compiler = GlslCompiler::linked;
  TargetEnv target = TargetEnv::vulkan_1_2;
  bool optimize = true;
  // Rewrite GL_NV_cooperative_matrix code to SPV_KHR_cooperative_matrix after compiling
  // (codegen/shader/spirv_coop_khr.h), for devices with only VK_KHR_cooperative_matrix.
  bool coop_khr = false;
  std::string name = "kernel";  // the file name in messages; not part of the cache key
};

// A shader that did not compile. what() holds the compiler's messages followed by the source
// with line numbers, the offending lines marked with '>'.
class ShaderCompileError : public DeviceError {
 public:
  ShaderCompileError(const std::string& what, std::vector<int> lines)
      : DeviceError(what), lines_(std::move(lines)) {}
  // 1-based source lines the compiler complained about.
  const std::vector<int>& lines() const { return lines_; }

 private:
  std::vector<int> lines_;
};

// Throws ShaderCompileError on a compile error.
std::vector<uint32_t> compile_glsl(std::string_view source, const CompileOptions& options);

// Identifies the compiler build (shaderc's SPIR-V version, glslang, SPIRV-Tools; for the current
// compiler its library's version): part of every cache key, so that a new compiler never reuses
// old binaries.
const std::string& compiler_version(GlslCompiler compiler = GlslCompiler::linked);

}  // namespace mn::codegen
