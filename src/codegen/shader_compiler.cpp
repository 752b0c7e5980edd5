#include "codegen/shader_compiler.h"

#include <glslang/build_info.h>
#include <shaderc/shaderc.h>
#include <spirv-tools/libspirv.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "codegen/spirv_coop_khr.h"

namespace mn::codegen {
namespace {

// shaderc_compile_into_spv may be called from several threads on one compiler object.
shaderc_compiler_t shared_compiler() {
  static const std::unique_ptr<shaderc_compiler, decltype(&shaderc_compiler_release)> compiler(
      shaderc_compiler_initialize(), &shaderc_compiler_release);
  if (!compiler) throw DeviceError("shaderc_compiler_initialize failed");
  return compiler.get();
}

// Lines look like "name:12: error: 'x' : undeclared identifier".
std::vector<int> error_lines(const std::string& log, const std::string& name) {
  std::vector<int> lines;
  std::istringstream in(log);
  std::string line;
  const std::string prefix = name + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t at = prefix.size();
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

const std::string& compiler_version() {
  static const std::string version = [] {
    unsigned spv = 0, revision = 0;
    shaderc_get_spv_version(&spv, &revision);
    return "shaderc-spv-" + std::to_string(spv) + "." + std::to_string(revision) + " glslang-" +
           std::to_string(GLSLANG_VERSION_MAJOR) + "." + std::to_string(GLSLANG_VERSION_MINOR) +
           "." + std::to_string(GLSLANG_VERSION_PATCH) + " " + spvSoftwareVersionDetailsString();
  }();
  return version;
}

std::vector<uint32_t> compile_glsl(std::string_view source, const CompileOptions& options) {
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
    const std::string log = shaderc_result_get_error_message(result.get());
    std::vector<int> lines = error_lines(log, options.name);
    std::string what = "shader '" + options.name + "' failed to compile:\n" + log;
    if (!what.empty() && what.back() != '\n') what += '\n';
    what += "source of '" + options.name + "':\n" + numbered_source(source, lines);
    throw ShaderCompileError(what, std::move(lines));
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
