#include "codegen/shader/current_glslang.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <meganeura/error.h>

#ifndef MN_DEFAULT_GLSLANG_LIBRARY
#define MN_DEFAULT_GLSLANG_LIBRARY ""
#endif

namespace mn::codegen {
namespace {

// The argument of glslang_compile_1_2, as the library's ABI lays it out (shader-slang,
// source/slang-glslang/slang-glslang.h). The library reads sizeInBytes and zero-fills what a
// caller's older struct lacks, so this layout stays valid for later versions.
using OutputFunc = void (*)(const void* data, size_t size, void* user);
struct SpirvVersion {
  int major, minor, patch;
};
struct CompileRequest12 {
  size_t size_in_bytes;
  const char* source_path;
  const void* input_begin;
  const void* input_end;
  OutputFunc diagnostic_func;
  void* diagnostic_user;
  OutputFunc output_func;
  void* output_user;
  int slang_stage;
  unsigned action;
  unsigned optimization_level;
  unsigned debug_info_type;
  const char* spirv_target_name;
  SpirvVersion spirv_version;
  const char* entry_point_name;
};
using CompileFn = int (*)(CompileRequest12*);

constexpr int kStageCompute = 6;          // SLANG_STAGE_COMPUTE
constexpr unsigned kActionCompile = 0;    // GLSLANG_ACTION_COMPILE_GLSL_TO_SPIRV
constexpr unsigned kOptimizeNone = 0;     // SLANG_OPTIMIZATION_LEVEL_NONE
constexpr unsigned kOptimizeHigh = 2;     // SLANG_OPTIMIZATION_LEVEL_HIGH

struct Loaded {
  CurrentGlslang info;
  CompileFn compile = nullptr;
};

// "libslang-glslang-2026.12.so" -> "slang-glslang-2026.12".
std::string version_of(const std::string& path) {
  std::string stem = std::filesystem::path(path).filename().string();
  if (stem.rfind("lib", 0) == 0) stem = stem.substr(3);
  const size_t so = stem.rfind(".so");
  if (so != std::string::npos) stem = stem.substr(0, so);
  return stem;
}

Loaded load() {
  Loaded l;
  const char* env = std::getenv("MN_GLSLANG_LIBRARY");
  const bool from_env = env && *env;
  l.info.path = from_env ? env : MN_DEFAULT_GLSLANG_LIBRARY;
  const std::string origin = from_env ? "MN_GLSLANG_LIBRARY" : "the build's default";
  if (l.info.path.empty()) {
    l.info.status =
        "no current glslang: the build found no .venv/.../libslang-glslang-*.so (scripts/setup.sh "
        "installs it) and MN_GLSLANG_LIBRARY is not set";
    return l;
  }
  if (!std::filesystem::exists(l.info.path)) {
    l.info.status = "no current glslang: " + origin + " '" + l.info.path + "' does not exist";
    return l;
  }
  // RTLD_LOCAL: its glslang stays apart from the glslang 12 linked into this program.
  void* handle = dlopen(l.info.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    l.info.status = "no current glslang: " + origin + " '" + l.info.path +
                    "' did not load: " + (why ? why : "unknown error");
    return l;
  }
  l.compile = reinterpret_cast<CompileFn>(dlsym(handle, "glslang_compile_1_2"));
  if (!l.compile) {
    l.info.status = "no current glslang: '" + l.info.path + "' has no glslang_compile_1_2";
    return l;
  }
  l.info.available = true;
  l.info.version = version_of(l.info.path);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

void append(const void* data, size_t size, void* user) {
  static_cast<std::string*>(user)->append(static_cast<const char*>(data), size);
}

void append_words(const void* data, size_t size, void* user) {
  auto* words = static_cast<std::vector<uint32_t>*>(user);
  const size_t at = words->size();
  words->resize(at + size / sizeof(uint32_t));
  std::memcpy(words->data() + at, data, size / sizeof(uint32_t) * sizeof(uint32_t));
}

}  // namespace

const CurrentGlslang& current_glslang() { return loaded().info; }

CurrentGlslangResult compile_with_current_glslang(std::string_view source, const std::string& name,
                                                  int spirv_minor, bool optimize) {
  const Loaded& l = loaded();
  if (!l.info.available) throw DeviceError("shader '" + name + "' needs " + l.info.status);
  CurrentGlslangResult result;
  CompileRequest12 r{};
  r.size_in_bytes = sizeof r;
  r.source_path = name.c_str();
  r.input_begin = source.data();
  r.input_end = source.data() + source.size();
  r.diagnostic_func = append;
  r.diagnostic_user = &result.log;
  r.output_func = append_words;
  r.output_user = &result.spirv;
  r.slang_stage = kStageCompute;
  r.action = kActionCompile;
  r.optimization_level = optimize ? kOptimizeHigh : kOptimizeNone;
  r.spirv_version = {1, spirv_minor, 0};
  r.entry_point_name = "main";
  // glslang's process-wide tables are set up once inside the library; compiles from several
  // threads at once are not promised by its C entry point.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  result.ok = l.compile(&r) == 0 && !result.spirv.empty();
  return result;
}

}  // namespace mn::codegen
