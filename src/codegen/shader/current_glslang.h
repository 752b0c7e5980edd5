#pragma once
// The current glslang (16.2), loaded at run time from the shared library of the slangpy wheel
// (libslang-glslang-*.so, C entry point glslang_compile_1_2). Debian 12's glslang 12, linked
// in, cannot compile GL_NV_cooperative_matrix2's tensor layouts, tensor loads and stores,
// per-element operations and reductions; kernels that use them compile here.
//
// Where the library is: MN_GLSLANG_LIBRARY (a path; read once, when first needed), else the
// path the build found in .venv (scripts/setup.sh installs it). Without it those kernels are
// not offered and the others run as before.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mn::codegen {

struct CurrentGlslang {
  bool available = false;
  std::string path;     // the library loaded, or the one that failed
  std::string version;  // part of shader cache keys, e.g. "slang-glslang-2026.12"
  std::string status;   // why it is not available, for `mn devices` and errors
};

// Loads the library on first use; later calls return the same answer.
const CurrentGlslang& current_glslang();

struct CurrentGlslangResult {
  bool ok = false;
  std::vector<uint32_t> spirv;
  std::string log;  // the compiler's messages
};

// Compiles one GLSL compute shader for SPIR-V `spirv_minor` (1.5 or 1.6), optimized for speed
// when `optimize`. Throws DeviceError when the library is not available.
CurrentGlslangResult compile_with_current_glslang(std::string_view source, const std::string& name,
                                                  int spirv_minor, bool optimize);

}  // namespace mn::codegen
