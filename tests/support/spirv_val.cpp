#include "support/spirv_val.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "support/scratch_dir.h"

#ifndef MN_SPIRV_VAL
#define MN_SPIRV_VAL ""
#endif

namespace mn::test {

// Empty where the build's spirv-val is not on this machine (a build carried to another one, as
// the GPU machine's): the checks that need it are skipped there and run where it was built.
const std::string& spirv_val_path() {
  static const std::string path = [] {
    const std::string built = MN_SPIRV_VAL;
    return !built.empty() && access(built.c_str(), X_OK) == 0 ? built : std::string();
  }();
  return path;
}

namespace {

struct ToolResult {
  int status = -1;
  std::string out;
};

// Runs the tool beside spirv-val on a file holding `spirv`, with `args` before the file name.
ToolResult run_tool(const std::string& tool, const std::string& args,
                    const std::vector<uint32_t>& spirv) {
  ScratchDir dir("spirv-tools");
  const auto file = dir.path() / "module.spv";
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(spirv.data()),
              static_cast<std::streamsize>(spirv.size() * sizeof(uint32_t)));
  }
  const std::string bin = spirv_val_path().substr(0, spirv_val_path().rfind('/') + 1) + tool;
  const std::string command = bin + " " + args + " '" + file.string() + "' 2>&1";
  ToolResult r;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {-1, "could not run " + command};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

std::string spirv_val_errors(const std::vector<uint32_t>& spirv) {
  if (spirv_val_path().empty()) return "no spirv-val (scripts/setup.sh installs it)";
  const ToolResult r = run_tool("spirv-val", "--target-env vulkan1.3", spirv);
  if (r.status == 0) return {};
  return "spirv-val exit status " + std::to_string(r.status) + ": " + r.out;
}

std::string spirv_dis(const std::vector<uint32_t>& spirv) {
  if (spirv_val_path().empty()) return {};
  const ToolResult r = run_tool("spirv-dis", "--no-header", spirv);
  return r.status == 0 ? r.out : std::string();
}

}  // namespace mn::test
