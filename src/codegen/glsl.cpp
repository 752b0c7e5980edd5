#include "codegen/glsl.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include <meganeura/error.h>

namespace mn::codegen::glsl {

std::string header() {
  return "#version 450\n"
         "#extension GL_EXT_shader_16bit_storage : require\n"
         "#extension GL_EXT_shader_explicit_arithmetic_types_int16 : enable\n"
         "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n";
}

std::string require_extensions(std::string glsl, std::initializer_list<const char*> extensions) {
  std::string lines;
  for (const char* e : extensions) lines += std::string("#extension ") + e + " : require\n";
  return glsl.insert(glsl.find('\n') + 1, lines);
}

std::string header(std::initializer_list<const char*> extensions) {
  return require_extensions(header(), extensions);
}

namespace {

// Conversions between f32 and the 16-bit formats written out bit by bit: OpFConvert's rounding
// mode and the flushing of f16 subnormals are implementation-defined, and the reference
// rounds to nearest even keeping subnormals, so the explicit forms make every device agree.
const char* kHalfConversions = R"(#ifndef MN_HALF_CONVERSIONS
#define MN_HALF_CONVERSIONS
// Rebiasing the exponent is exact for normals; a subnormal m 2^-24 rebiased one step further
// reads as 2^-14 + m 2^-24, and subtracting 2^-14 is exact.
float mn_f16_to_f32(uint h) {
  uint a = h & 0x7fffu;
  float f = uintBitsToFloat((a << 13) + 0x38000000u);
  if (a < 0x400u) f = uintBitsToFloat((a << 13) + 0x38800000u) - 6.103515625e-05;
  if (a >= 0x7c00u) f = uintBitsToFloat((a << 13) | 0x7f800000u);
  return uintBitsToFloat(floatBitsToUint(f) | ((h & 0x8000u) << 16));
}
uint mn_f32_to_f16(float v) {
  uint x = floatBitsToUint(v), s = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return s | 0x7e00u;
  if (a >= 0x477ff000u) return s | 0x7c00u;  // from 65520 on: infinity
  if (a < 0x38800000u) return s | uint(roundEven(uintBitsToFloat(a) * 16777216.0));
  uint r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return s | (r >> 13);
}
float mn_bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }
uint mn_f32_to_bf16(float v) {
  uint u = floatBitsToUint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN (quiet)
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
#endif
)";

}  // namespace

std::string buffer(uint32_t binding, DType dtype, const std::string& name, bool readonly) {
  const std::string b = std::to_string(binding);
  const std::string data = name + "_data";
  std::string elem;
  std::string ld, st, ldi, sti;
  const bool half = dtype == DType::f16 || dtype == DType::bf16;
  switch (dtype) {
    case DType::f32:
      elem = "float";
      ld = "return " + data + "[i];";
      st = data + "[i] = v;";
      break;
    case DType::f16:
      elem = "uint16_t";
      ld = "return mn_f16_to_f32(uint(" + data + "[i]));";
      st = data + "[i] = uint16_t(mn_f32_to_f16(v));";
      break;
    case DType::bf16:
      elem = "uint16_t";
      ld = "return mn_bf16_to_f32(uint(" + data + "[i]));";
      st = data + "[i] = uint16_t(mn_f32_to_bf16(v));";
      break;
    case DType::i32:
      elem = "int";
      ld = "return float(" + data + "[i]);";
      st = data + "[i] = int(v);";
      ldi = "return " + data + "[i];";
      sti = data + "[i] = v;";
      break;
    case DType::u32:
      elem = "uint";
      ld = "return float(" + data + "[i]);";
      st = data + "[i] = uint(max(v, 0.0));";
      ldi = "return int(" + data + "[i]);";
      sti = data + "[i] = uint(v);";
      break;
  }
  std::string s = half ? kHalfConversions : "";
  s += "layout(std430, set = 0, binding = " + b + ") " + (readonly ? "readonly " : "") +
       "buffer Buffer" + b + " { " + elem + " " + data + "[]; };\n";
  s += "float " + name + "_ld(uint i) { " + ld + " }\n";
  if (!ldi.empty()) s += "int " + name + "_ldi(uint i) { " + ldi + " }\n";
  if (half) s += "uint " + name + "_ldb(uint i) { return uint(" + data + "[i]); }\n";
  if (!readonly) {
    s += "void " + name + "_st(uint i, float v) { " + st + " }\n";
    if (!sti.empty()) s += "void " + name + "_sti(uint i, int v) { " + sti + " }\n";
    if (half) s += "void " + name + "_stb(uint i, uint v) { " + data + "[i] = uint16_t(v); }\n";
  }
  return s;
}

const char* half_conversions() { return kHalfConversions; }

std::string quad_view(uint32_t binding, DType dtype, const std::string& name) {
  const std::string b = std::to_string(binding), data = name + "4_data";
  const bool f32 = dtype == DType::f32;
  std::string s = "layout(std430, set = 0, binding = " + b + ") readonly buffer Quads" + b + " { " +
                  (f32 ? "vec4 " : "uvec2 ") + data + "[]; };\n";
  if (f32) return s + "vec4 " + name + "4_ld(uint i) { return " + data + "[i]; }\n";
  const std::string cv = dtype == DType::f16 ? "mn_f16_to_f32" : "mn_bf16_to_f32";
  return s + "vec4 " + name + "4_ld(uint i) { uvec2 u = " + data + "[i]; return vec4(" + cv +
         "(u.x & 0xffffu), " + cv + "(u.x >> 16), " + cv + "(u.y & 0xffffu), " + cv +
         "(u.y >> 16)); }\n";
}

void require_storage(const LowerContext& ctx) {
  if (ctx.device.storage_16bit) return;
  auto check = [&](DType t, const std::string& what) {
    if (t == DType::f16 || t == DType::bf16) {
      throw Error(std::string(ctx.node.op_name()) + ": " + what + " is " + dtype_name(t) +
                  ", but the device lacks 16-bit storage buffer access "
                  "(storageBuffer16BitAccess); use f32 tensors on this device");
    }
  };
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    check(ctx.inputs[i].dtype, "input " + std::to_string(i));
  }
  check(ctx.node.type.dtype, "the output");
}

Linear linear_grid(uint64_t n, const DeviceTraits& d, uint32_t local) {
  Linear l;
  l.local = local;
  // gid() is a 32-bit index.
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw Error("kernel grid of " + std::to_string(n) + " elements exceeds 32-bit indexing");
  }
  uint64_t groups = std::max<uint64_t>(1, (n + local - 1) / local);
  uint64_t x = std::min<uint64_t>(groups, d.max_group_count);
  uint64_t y = (groups + x - 1) / x;
  if (y > d.max_group_count) {
    throw Error("kernel grid of " + std::to_string(n) + " elements exceeds the device's limits");
  }
  l.groups = {static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1};
  return l;
}

std::string gid_function() {
  return "uint gid() { return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * "
         "gl_WorkGroupSize.x + gl_LocalInvocationID.x; }\n";
}

std::string unravel(std::span<const int64_t> shape, const std::string& linear,
                    const std::string& prefix) {
  if (shape.empty()) return "";
  std::string s = "uint " + prefix + "t = " + linear + ";\n";
  for (size_t k = shape.size(); k-- > 0;) {
    const std::string d = std::to_string(shape[k]) + "u";
    if (k == 0) {
      s += "uint " + prefix + std::to_string(k) + " = " + prefix + "t;\n";
    } else {
      s += "uint " + prefix + std::to_string(k) + " = " + prefix + "t % " + d + "; " + prefix +
           "t /= " + d + ";\n";
    }
  }
  return s;
}

std::string broadcast_offset(std::span<const int64_t> in, std::span<const int64_t> out,
                             const std::string& prefix) {
  if (in.size() > out.size()) throw Error("broadcast_offset: input rank exceeds output rank");
  const size_t lead = out.size() - in.size();
  auto strides = contiguous_strides(in);
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == 1) continue;
    if (!s.empty()) s += " + ";
    s += prefix + std::to_string(lead + i);
    if (strides[i] != 1) s += " * " + std::to_string(strides[i]) + "u";
  }
  return s.empty() ? "0u" : "(" + s + ")";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

std::string float_literal(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(f)) return "uintBitsToFloat(0x7fc00000u)";
  if (std::isinf(f)) return f > 0 ? "uintBitsToFloat(0x7f800000u)" : "uintBitsToFloat(0xff800000u)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return "float(" + s + ")";
}

std::string elementwise_kernel(const std::string& declarations, const std::string& body,
                               uint64_t n) {
  return header() + declarations + gid_function() +
         "void main() {\n  uint i = gid();\n  if (i >= " + std::to_string(n) + "u) return;\n" +
         body + "}\n";
}

KernelLaunch elementwise_launch(std::string name, const std::string& declarations,
                                const std::string& body, uint64_t n, const DeviceTraits& d,
                                std::vector<KernelBinding> bindings, uint32_t local) {
  const Linear grid = linear_grid(n, d, local);
  KernelLaunch k;
  k.name = std::move(name);
  k.glsl = elementwise_kernel(declarations, body, n);
  k.workgroup = {grid.local, 1, 1};
  k.groups = grid.groups;
  k.bindings = std::move(bindings);
  return k;
}

}  // namespace mn::codegen::glsl
