#include "codegen/shader/shader_compiler.h"

#include <glslang/build_info.h>
#include <shaderc/shaderc.h>
#include <spirv-tools/libspirv.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "codegen/shader/current_glslang.h"
#include "codegen/shader/spirv_coop_khr.h"

namespace mn::codegen {
namespace {

// shaderc_compile_into_spv may be called from several threads on one compiler object.
shaderc_compiler_t shared_compiler() {
  static const std::unique_ptr<shaderc_compiler, decltype(&shaderc_compiler_release)> compiler(
      shaderc_compiler_initialize(), &shaderc_compiler_release);
  if (!compiler) throw DeviceError("shaderc_compiler_initialize failed");
  return compiler.get();
}

// Lines look like "name:12: error: 'x' : undeclared identifier" (shaderc) or
// "ERROR: name:12: 'x' : undeclared identifier" (glslang).
std::vector<int> error_lines(const std::string& log, const std::string& name) {
  std::vector<int> lines;
  std::istringstream in(log);
  std::string line;
  const std::string prefix = name + ":";
  while (std::getline(in, line)) {
    size_t start = 0;
    for (const char* tag : {"ERROR: ", "WARNING: "}) {
      if (line.rfind(tag, 0) == 0) start = std::strlen(tag);
    }
    if (line.compare(start, prefix.size(), prefix) != 0) continue;
    const size_t at = start + prefix.size();
    size_t end = at;
    while (end < line.size() && line[end] >= '0' && line[end] <= '9') ++end;
    if (end == at || end >= line.size() || line[end] != ':') continue;
    lines.push_back(std::stoi(line.substr(at, end - at)));
  }
  std::sort(lines.begin(), lines.end());
  lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
  return lines;
}

// The whole source when short; otherwise a window around each reported line.
std::string numbered_source(std::string_view source, const std::vector<int>& marked) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= source.size()) {
    const size_t end = source.find('\n', start);
    if (end == std::string_view::npos) {
      if (start < source.size()) lines.push_back(source.substr(start));
      break;
    }
    lines.push_back(source.substr(start, end - start));
    start = end + 1;
  }
  constexpr int kWholeSourceLines = 200, kContext = 5;
  const int count = static_cast<int>(lines.size());
  auto shown = [&](int n) {
    if (count <= kWholeSourceLines || marked.empty()) return true;
    return std::any_of(marked.begin(), marked.end(),
                       [&](int m) { return n >= m - kContext && n <= m + kContext; });
  };
  std::string text;
  bool skipped = false;
  for (int n = 1; n <= count; ++n) {
    if (!shown(n)) {
      skipped = true;
      continue;
    }
    if (skipped) text += "      ...\n";
    skipped = false;
    const bool mark = std::find(marked.begin(), marked.end(), n) != marked.end();
    char prefix[24];
    std::snprintf(prefix, sizeof prefix, "%s%5d | ", mark ? ">" : " ", n);
    text += prefix;
    text += lines[n - 1];
    text += '\n';
  }
  if (skipped) text += "      ...\n";
  return text;
}

}  // namespace

TargetEnv target_env_for(uint32_t api) {
  // VK_API_VERSION_1_3 without depending on Vulkan headers here.
  constexpr uint32_t kVulkan13 = (1u << 22) | (3u << 12);
  return api >= kVulkan13 ? TargetEnv::vulkan_1_3 : TargetEnv::vulkan_1_2;
}

const std::string& compiler_version(GlslCompiler compiler) {
  if (compiler == GlslCompiler::current) {
    static const std::string version = "current " + current_glslang().version;
    return version;
  }
  static const std::string version = [] {
    unsigned spv = 0, revision = 0;
    shaderc_get_spv_version(&spv, &revision);
    return "shaderc-spv-" + std::to_string(spv) + "." + std::to_string(revision) + " glslang-" +
           std::to_string(GLSLANG_VERSION_MAJOR) + "." + std::to_string(GLSLANG_VERSION_MINOR) +
           "." + std::to_string(GLSLANG_VERSION_PATCH) + " " + spvSoftwareVersionDetailsString();
  }();
  return version;
}

namespace {

[[noreturn]] void throw_compile_error(std::string_view source, const CompileOptions& options,
                                      const std::string& log) {
  std::vector<int> lines = error_lines(log, options.name);
  std::string what = "shader '" + options.name + "' failed to compile:\n" + log;
  if (!what.empty() && what.back() != '\n') what += '\n';
  what += "source of '" + options.name + "':\n" + numbered_source(source, lines);
  throw ShaderCompileError(what, std::move(lines));
}

// The current compiler's entry point takes no macros: their #defines follow the #version line,
// and a #line directive keeps the reported line numbers those of the source.
std::string with_macros(std::string_view source, const std::vector<ShaderMacro>& macros) {
  if (macros.empty()) return std::string(source);
  const size_t version = source.find("#version");
  const size_t eol = version == std::string_view::npos ? std::string_view::npos
                                                       : source.find('\n', version);
  if (eol == std::string_view::npos) {
    throw DeviceError("a shader with macros for the current compiler needs a #version line");
  }
  int line = 2;
  for (size_t i = 0; i < version; ++i) line += source[i] == '\n';
  std::string text(source.substr(0, eol + 1));
  for (const ShaderMacro& m : macros) text += "#define " + m.name + " " + m.value + "\n";
  text += "#line " + std::to_string(line) + "\n";
  text += source.substr(eol + 1);
  return text;
}

std::vector<uint32_t> compile_current(std::string_view source, const CompileOptions& options) {
  if (options.coop_khr) {
    throw DeviceError("shader '" + options.name +
                      "': the current compiler writes KHR cooperative matrices itself; the "
                      "NV-to-KHR rewrite does not apply");
  }
  const std::string text = with_macros(source, options.macros);
  const int minor = options.target == TargetEnv::vulkan_1_3 ? 6 : 5;
  CurrentGlslangResult r = compile_with_current_glslang(text, options.name, minor, options.optimize);
  if (!r.ok) throw_compile_error(source, options, r.log.empty() ? "no SPIR-V and no message" : r.log);
  return std::move(r.spirv);
}

}  // namespace

std::vector<uint32_t> compile_glsl(std::string_view source, const CompileOptions& options) {
  if (options.compiler == GlslCompiler::current) return compile_current(source, options);
  shaderc_compiler_t compiler = shared_compiler();
  std::unique_ptr<shaderc_compile_options, decltype(&shaderc_compile_options_release)> opts(
      shaderc_compile_options_initialize(), &shaderc_compile_options_release);
  if (!opts) throw DeviceError("shaderc_compile_options_initialize failed");
  const bool v13 = options.target == TargetEnv::vulkan_1_3;
  shaderc_compile_options_set_target_env(
      opts.get(), shaderc_target_env_vulkan,
      v13 ? shaderc_env_version_vulkan_1_3 : shaderc_env_version_vulkan_1_2);
  shaderc_compile_options_set_target_spirv(
      opts.get(), v13 ? shaderc_spirv_version_1_6 : shaderc_spirv_version_1_5);
  shaderc_compile_options_set_optimization_level(
      opts.get(),
      options.optimize ? shaderc_optimization_level_performance : shaderc_optimization_level_zero);
  for (const ShaderMacro& m : options.macros) {
    shaderc_compile_options_add_macro_definition(opts.get(), m.name.data(), m.name.size(),
                                                 m.value.data(), m.value.size());
  }
  std::unique_ptr<shaderc_compilation_result, decltype(&shaderc_result_release)> result(
      shaderc_compile_into_spv(compiler, source.data(), source.size(), shaderc_compute_shader,
                               options.name.c_str(), "main", opts.get()),
      &shaderc_result_release);
  if (!result) throw DeviceError("shaderc_compile_into_spv returned no result");
  if (shaderc_result_get_compilation_status(result.get()) != shaderc_compilation_status_success) {
    throw_compile_error(source, options, shaderc_result_get_error_message(result.get()));
  }
  const size_t bytes = shaderc_result_get_length(result.get());
  std::vector<uint32_t> spirv(bytes / sizeof(uint32_t));
  std::copy_n(shaderc_result_get_bytes(result.get()), spirv.size() * sizeof(uint32_t),
              reinterpret_cast<char*>(spirv.data()));
  if (options.coop_khr) {
    try {
      spirv = rewrite_nv_coop_to_khr(spirv);
    } catch (const Error& e) {
      throw DeviceError("shader '" + options.name + "': " + e.what());
    }
  }
  return spirv;
}

}  // namespace mn::codegen
