#pragma once
// Building blocks of generated GLSL: headers, typed buffers with float load/store helpers,
// index arithmetic with constant shapes, and a 1-D grid that covers any element count.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include <meganeura/dtype.h>

#include "codegen/kernel.h"

namespace mn::codegen::glsl {

// "#version 450" plus the extensions every kernel may use.
std::string header();
// header() with `#extension <name> : require` lines for `extensions`.
std::string header(std::initializer_list<const char*> extensions);
// A whole shader's text with those lines added after its #version line.
std::string require_extensions(std::string glsl, std::initializer_list<const char*> extensions);

// `v` as a GLSL uint literal: "123u".
inline std::string ulit(int64_t v) { return std::to_string(v) + "u"; }

// A storage buffer `name` at `binding` holding `dtype`, plus helpers
//   float <name>_ld(uint i); void <name>_st(uint i, float v)   (any dtype; ints convert)
//   int <name>_ldi(uint i); void <name>_sti(uint i, int v)      (i32/u32 buffers)
//   uint <name>_ldb(uint i); void <name>_stb(uint i, uint v)    (f16/bf16: the raw 16 bits)
// f16/bf16 convert exactly on load and round to nearest even on store (NaN stays NaN, f16
// overflows to infinity), as the CPU reference does; they need 16-bit storage access
// (require_storage).
std::string buffer(uint32_t binding, DType dtype, const std::string& name, bool readonly);
// The exact f32 <-> f16/bf16 conversions buffer() declares for 16-bit tensors (mn_f16_to_f32,
// mn_f32_to_f16, mn_bf16_to_f32, mn_f32_to_bf16), guarded so that a kernel may hold them twice.
const char* half_conversions();
// A second view of `binding` (already declared by buffer() as `name`, f32, f16 or bf16) as
// groups of four elements: `vec4 <name>4_ld(uint i)` reads elements 4i..4i+3. The tensor's
// offset in its buffer must be a multiple of four elements.
std::string quad_view(uint32_t binding, DType dtype, const std::string& name);

// mn::Error naming the op and operand when the node reads or writes f16/bf16 tensors and the
// device has no 16-bit storage buffer access. Every lowering using buffer() calls it.
void require_storage(const LowerContext& ctx);

// A 1-D launch over n elements with `local` threads per group: the grid folds into two
// dimensions past the device's group-count limit (the last row may hold groups past n, so
// the shader bounds-checks gid()). The shader reads the index as `gid()`. mn::Error when n
// exceeds 32-bit indexing or the folded grid still exceeds the limit.
struct Linear {
  std::array<uint32_t, 3> groups{1, 1, 1};
  uint32_t local = 256;
};
Linear linear_grid(uint64_t n, const DeviceTraits& d, uint32_t local = 256);
// Defines `uint gid()` for a Linear grid.
std::string gid_function();

// Statements declaring `uint <prefix><d>` for every axis d of `shape`, from the linear index
// expression `linear` (row-major).
std::string unravel(std::span<const int64_t> shape, const std::string& linear,
                    const std::string& prefix);
// The element offset in a tensor of shape `in` broadcast to `out`, from coordinates
// <prefix><d> of `out` (an expression; "0u" for a scalar).
std::string broadcast_offset(std::span<const int64_t> in, std::span<const int64_t> out,
                             const std::string& prefix);
// A GLSL float literal that round-trips the double's f32 value ("1.0", "-3.5e-08", "(1.0/0.0)").
std::string float_literal(double v);

// `s` with every `from` replaced by `to` (a kernel text's placeholders filled in).
std::string replace_all(std::string s, const std::string& from, const std::string& to);

// The complete source of a 1-D elementwise kernel: `body` runs for index `i` < n.
std::string elementwise_kernel(const std::string& declarations, const std::string& body,
                               uint64_t n);
// That kernel as a launch over its linear grid (`local` threads per group), with its bindings.
KernelLaunch elementwise_launch(std::string name, const std::string& declarations,
                                const std::string& body, uint64_t n, const DeviceTraits& d,
                                std::vector<KernelBinding> bindings = {}, uint32_t local = 256);

}  // namespace mn::codegen::glsl
