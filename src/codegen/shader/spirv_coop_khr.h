#pragma once
// Rewrites a SPIR-V module that uses SPV_NV_cooperative_matrix into one that uses
// SPV_KHR_cooperative_matrix, so that kernels written in GL_NV_cooperative_matrix GLSL (which
// Debian's glslang compiles, unlike GL_KHR_cooperative_matrix) also run on AMD and Intel.
//
// Usage, either directly on a compiled module:
//   std::vector<uint32_t> khr = rewrite_nv_coop_to_khr(compile_glsl(source, options));
// or through the compiler, which then runs the pass on every shader it compiles (and keys the
// shader cache on it):
//   CompileOptions options;
//   options.coop_khr = true;  // when the device has VK_KHR_cooperative_matrix but not the NV one
//   auto spirv = compile_glsl(source, options);
// A module without cooperative matrices comes back unchanged.
//
// What changes:
// - OpCapability CooperativeMatrixNV -> CooperativeMatrixKHR, OpExtension
//   "SPV_NV_cooperative_matrix" -> "SPV_KHR_cooperative_matrix".
// - OpTypeCooperativeMatrixNV -> OpTypeCooperativeMatrixKHR with a matrix use. NV types carry
//   no use, so it is inferred: values connected through loads, stores, access chains, phis,
//   selects, copies, composites and element-wise arithmetic share a use, and
//   OpCooperativeMatrixMulAddNV fixes A, B and the accumulator (C and the result). Values that
//   reach no MulAdd become accumulators. An NV type used in several roles (one f16 16x16 type
//   for A and for B, say) becomes several KHR types, with the arrays and pointers built on it;
//   constants of such a type are duplicated per role.
// - Load/Store: the NV column-major bool becomes a KHR MemoryLayout constant, and the operand
//   order (layout before stride) is the KHR one; memory operands are kept.
// - MulAdd gets the signedness operands of integer component types; Length names the KHR type.
//
// Not supported (mn::Error naming the instruction): one value used as two different matrix
// uses (A and B of one MulAdd, or a conversion from accumulator to A), cooperative matrices
// passed to or returned from functions or held in structs, OpCooperativeMatrixLengthNV on an
// NV type that splits into several uses, a column-major operand that is not a constant bool,
// and any other instruction producing or consuming a cooperative matrix that the pass does not
// know. The output is never a silently wrong module.
#include <cstdint>
#include <span>
#include <vector>

#include <meganeura/error.h>

namespace mn::codegen {

// Throws mn::Error on a malformed module or on a cooperative-matrix construct it cannot map.
std::vector<uint32_t> rewrite_nv_coop_to_khr(std::span<const uint32_t> spirv);

// True when the module declares the CooperativeMatrixNV capability.
bool uses_nv_cooperative_matrix(std::span<const uint32_t> spirv);

}  // namespace mn::codegen
