#pragma once
// spirv-val and spirv-dis 2025.5 (the current toolchain's, cmake/CurrentToolchain.cmake).
#include <cstdint>
#include <string>
#include <vector>

namespace mn::test {

// The spirv-val the build found, where this machine has it; empty otherwise (none found, or a
// build carried to another machine).
const std::string& spirv_val_path();

// spirv-val's messages for `spirv` validated for Vulkan 1.3 (SPIR-V 1.6), with the exit status;
// empty when the module is valid.
std::string spirv_val_errors(const std::vector<uint32_t>& spirv);

// spirv-dis's text of `spirv` (the same toolchain's disassembler, which names the
// cooperative-matrix-2 instructions); empty when it is missing or fails.
std::string spirv_dis(const std::vector<uint32_t>& spirv);

}  // namespace mn::test
