// The NV -> KHR cooperative-matrix rewrite, checked without a GPU: NV kernels compiled by the
// project's compiler are rewritten, inspected word by word, and validated with SPIRV-Tools.
//
// Debian's SPIRV-Tools (2023.1) predates SPV_KHR_cooperative_matrix, so the KHR module is
// validated through a structural mirror: each KHR instruction is mapped back to its NV form
// (the use dropped, the layout constant turned into the NV bool) with duplicate type
// declarations allowed, and that module must pass spvValidate for Vulkan 1.3. This checks ids,
// types, operand counts and orders, section order and every NV rule; the KHR-only rules (uses
// of MulAdd operands, layout constants) are checked directly below. When MN_SPIRV_VAL names a
// spirv-val that knows the KHR extension, the KHR module is validated by it as well.
#include <gtest/gtest.h>
#include <spirv-tools/libspirv.h>
#define SPV_ENABLE_UTILITY_CODE
#include <unistd.h>
#include <spirv/unified1/spirv.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "codegen/shader/shader_cache.h"
#include "codegen/shader/shader_compiler.h"
#include "codegen/shader/spirv_coop_khr.h"
#include "vulkan/arena.h"
#include "vulkan/device.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn::codegen {
namespace {

// Opcodes and enums, spelled out so that the test does not share the pass's tables.
constexpr uint32_t kOpExtension = 10, kOpTypeInt = 21, kOpTypeBool = 20, kOpConstantTrue = 41,
                   kOpConstantFalse = 42, kOpConstant = 43, kOpCapability = 17, kOpFunction = 54,
                   kOpTypePointer = 32, kOpTypeArray = 28, kOpVariable = 59, kOpSpecConstantOp = 52;
constexpr uint32_t kOpTypeCoopNV = 5358, kOpLoadNV = 5359, kOpStoreNV = 5360, kOpMulAddNV = 5361,
                   kOpLengthNV = 5362;
constexpr uint32_t kOpTypeCoopKHR = 4456, kOpLoadKHR = 4457, kOpStoreKHR = 4458,
                   kOpMulAddKHR = 4459, kOpLengthKHR = 4460;
constexpr uint32_t kCapNV = 5357, kCapKHR = 6022;
constexpr uint32_t kUseA = 0, kUseB = 1, kUseAcc = 2;

struct Inst {
  uint32_t op;
  std::vector<uint32_t> w;
};

std::vector<Inst> instructions(const std::vector<uint32_t>& spirv) {
  std::vector<Inst> out;
  for (size_t at = 5; at < spirv.size();) {
    const uint32_t count = spirv[at] >> 16;
    EXPECT_GT(count, 0u);
    if (count == 0 || at + count > spirv.size()) break;
    out.push_back({spirv[at] & 0xffff, {spirv.begin() + at, spirv.begin() + at + count}});
    at += count;
  }
  return out;
}

std::string string_operand(const Inst& in, size_t from) {
  std::string s;
  for (size_t i = from; i < in.w.size(); ++i) {
    for (int b = 0; b < 4; ++b) {
      const char c = static_cast<char>(in.w[i] >> (8 * b));
      if (c == 0) return s;
      s += c;
    }
  }
  return s;
}

std::vector<uint32_t> string_words(const std::string& s) {
  std::vector<uint32_t> w(s.size() / 4 + 1, 0);
  for (size_t i = 0; i < s.size(); ++i) w[i / 4] |= uint32_t(uint8_t(s[i])) << (8 * (i % 4));
  return w;
}

std::string validate(const std::vector<uint32_t>& spirv) {
  spv_context context = spvContextCreate(SPV_ENV_VULKAN_1_3);
  spv_const_binary_t binary{spirv.data(), spirv.size()};
  spv_diagnostic diagnostic = nullptr;
  const spv_result_t result = spvValidate(context, &binary, &diagnostic);
  std::string message = result == SPV_SUCCESS ? "" : "spvValidate failed";
  if (diagnostic) {
    message += std::string(": ") + diagnostic->error;
    spvDiagnosticDestroy(diagnostic);
  }
  spvContextDestroy(context);
  return message;
}

// What the KHR module says, read back independently of the pass.
struct KhrModule {
  std::map<uint32_t, uint32_t> constants;   // OpConstant id -> value
  std::map<uint32_t, uint32_t> type_use;    // OpTypeCooperativeMatrixKHR id -> use
  std::map<uint32_t, uint32_t> value_type;  // result id -> result type
  std::map<uint32_t, uint32_t> pointee;     // pointer/array type -> element type
  std::vector<Inst> loads, stores, muladds, lengths;
  bool has_khr_capability = false, has_khr_extension = false;
  std::vector<std::string> leftovers;  // anything NV that survived

  // The use of a matrix value, through arrays and pointers for variables.
  uint32_t use_of_type(uint32_t t) const {
    for (int depth = 0; depth < 8; ++depth) {
      auto u = type_use.find(t);
      if (u != type_use.end()) return u->second;
      auto p = pointee.find(t);
      if (p == pointee.end()) break;
      t = p->second;
    }
    return ~0u;
  }
  uint32_t use_of_value(uint32_t v) const {
    auto t = value_type.find(v);
    return t == value_type.end() ? ~0u : use_of_type(t->second);
  }
};

KhrModule read_khr(const std::vector<uint32_t>& spirv) {
  KhrModule m;
  for (const Inst& in : instructions(spirv)) {
    switch (in.op) {
      case kOpCapability:
        if (in.w[1] == kCapKHR) m.has_khr_capability = true;
        if (in.w[1] == kCapNV) m.leftovers.push_back("OpCapability CooperativeMatrixNV");
        break;
      case kOpExtension: {
        const std::string name = string_operand(in, 1);
        if (name == "SPV_KHR_cooperative_matrix") m.has_khr_extension = true;
        if (name == "SPV_NV_cooperative_matrix") m.leftovers.push_back("OpExtension " + name);
        break;
      }
      case kOpConstant:
        m.constants[in.w[2]] = in.w[3];
        break;
      case kOpTypeCoopKHR:
        EXPECT_EQ(in.w.size(), 7u);
        m.type_use[in.w[1]] = m.constants.at(in.w[6]);
        break;
      case kOpTypePointer:
        m.pointee[in.w[1]] = in.w[3];
        break;
      case kOpTypeArray:
        m.pointee[in.w[1]] = in.w[2];
        break;
      case kOpLoadKHR:
        m.loads.push_back(in);
        break;
      case kOpStoreKHR:
        m.stores.push_back(in);
        break;
      case kOpMulAddKHR:
        m.muladds.push_back(in);
        break;
      case kOpLengthKHR:
        m.lengths.push_back(in);
        break;
      case kOpSpecConstantOp:
        // .length() as a constant: the type moves to where OpCooperativeMatrixLengthKHR has it.
        if (in.w[3] == kOpLengthKHR)
          m.lengths.push_back({kOpLengthKHR, {0, in.w[1], in.w[2], in.w[4]}});
        if (in.w[3] == kOpLengthNV)
          m.leftovers.push_back("OpSpecConstantOp CooperativeMatrixLengthNV");
        break;
      case kOpTypeCoopNV:
      case kOpLoadNV:
      case kOpStoreNV:
      case kOpMulAddNV:
      case kOpLengthNV:
        m.leftovers.push_back("NV opcode " + std::to_string(in.op));
        break;
      default:
        break;
    }
    bool has_result = false, has_type = false;
    spv::HasResultAndType(static_cast<spv::Op>(in.op), &has_result, &has_type);
    if (has_type || in.op == kOpLoadKHR || in.op == kOpMulAddKHR || in.op == kOpLengthKHR) {
      m.value_type[in.w[2]] = in.w[1];
    }
  }
  return m;
}

// The KHR module mapped back to NV for SPIRV-Tools 2023.1 (see the top of this file).
std::vector<uint32_t> mirror_to_nv(const std::vector<uint32_t>& khr) {
  const KhrModule m = read_khr(khr);
  std::vector<uint32_t> out(khr.begin(), khr.begin() + 5);
  uint32_t bound = out[3];
  const uint32_t bool_type = bound++, yes = bound++, no = bound++;
  out[3] = bound;
  auto put = [&](uint32_t op, std::vector<uint32_t> operands) {
    out.push_back(uint32_t((operands.size() + 1) << 16) | op);
    out.insert(out.end(), operands.begin(), operands.end());
  };
  auto column_major = [&](uint32_t layout) {
    const uint32_t value = m.constants.at(layout);
    EXPECT_TRUE(value == 0 || value == 1) << "layout " << value;
    return value == 1 ? yes : no;
  };
  bool extension_added = false, bools_added = false;
  for (const Inst& in : instructions(khr)) {
    const auto& w = in.w;
    if (in.op == kOpExtension && !extension_added) {
      put(kOpExtension, string_words("SPV_VALIDATOR_ignore_type_decl_unique"));
      extension_added = true;
    }
    if (in.op == kOpFunction && !bools_added) {
      put(kOpTypeBool, {bool_type});
      put(kOpConstantTrue, {bool_type, yes});
      put(kOpConstantFalse, {bool_type, no});
      bools_added = true;
    }
    switch (in.op) {
      case kOpCapability:
        put(kOpCapability, {w[1] == kCapKHR ? kCapNV : w[1]});
        break;
      case kOpExtension:
        put(kOpExtension, string_operand(in, 1) == "SPV_KHR_cooperative_matrix"
                              ? string_words("SPV_NV_cooperative_matrix")
                              : std::vector<uint32_t>(w.begin() + 1, w.end()));
        break;
      case kOpTypeCoopKHR:
        put(kOpTypeCoopNV, {w[1], w[2], w[3], w[4], w[5]});
        break;
      case kOpLoadKHR: {
        std::vector<uint32_t> v = {w[1], w[2], w[3], w[5], column_major(w[4])};
        v.insert(v.end(), w.begin() + 6, w.end());
        put(kOpLoadNV, v);
        break;
      }
      case kOpStoreKHR: {
        std::vector<uint32_t> v = {w[1], w[2], w[4], column_major(w[3])};
        v.insert(v.end(), w.begin() + 5, w.end());
        put(kOpStoreNV, v);
        break;
      }
      case kOpMulAddKHR:
        put(kOpMulAddNV, {w[1], w[2], w[3], w[4], w[5]});
        break;
      case kOpLengthKHR:
        put(kOpLengthNV, {w[1], w[2], w[3]});
        break;
      case kOpSpecConstantOp:
        if (w[3] == kOpLengthKHR) {
          put(kOpSpecConstantOp, {w[1], w[2], kOpLengthNV, w[4]});
          break;
        }
        out.insert(out.end(), w.begin(), w.end());
        break;
      default:
        out.insert(out.end(), w.begin(), w.end());
        break;
    }
  }
  return out;
}

// Runs the spirv-val named by MN_SPIRV_VAL (one that knows SPV_KHR_cooperative_matrix), if any.
std::string external_validate(const std::vector<uint32_t>& spirv) {
  const char* tool = std::getenv("MN_SPIRV_VAL");
  if (!tool || !*tool) return "";
  const auto path = std::filesystem::temp_directory_path() /
                    ("mn_coop_khr_" + std::to_string(::getpid()) + ".spv");
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(spirv.data()), spirv.size() * 4);
  }
  const std::string command =
      std::string(tool) + " --target-env vulkan1.3 " + path.string() + " 2>&1";
  std::string output;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buffer[512];
    while (fgets(buffer, sizeof buffer, p)) output += buffer;
    const int status = pclose(p);
    if (status != 0 && output.empty()) output = "exit status " + std::to_string(status);
    if (status == 0) output.clear();
  } else {
    output = "could not run " + std::string(tool);
  }
  std::filesystem::remove(path);
  return output;
}

std::vector<uint32_t> compile(const std::string& source, bool optimize) {
  CompileOptions options;
  options.optimize = optimize;
  if (optimize) options.macros = {{"OPTIMIZED", "1"}};
  options.target = TargetEnv::vulkan_1_3;
  options.name = "coop_kernel";
  return compile_glsl(source, options);
}

// Rewrites and checks everything that must hold for any kernel.
KhrModule rewrite_and_check(const std::vector<uint32_t>& nv) {
  EXPECT_EQ(validate(nv), "");
  EXPECT_TRUE(uses_nv_cooperative_matrix(nv));
  const std::vector<uint32_t> khr = rewrite_nv_coop_to_khr(nv);
  EXPECT_FALSE(uses_nv_cooperative_matrix(khr));
  const KhrModule m = read_khr(khr);
  EXPECT_TRUE(m.has_khr_capability);
  EXPECT_TRUE(m.has_khr_extension);
  EXPECT_TRUE(m.leftovers.empty()) << m.leftovers.front();
  EXPECT_EQ(validate(mirror_to_nv(khr)), "");
  EXPECT_EQ(external_validate(khr), "");
  for (const Inst& mad : m.muladds) {
    EXPECT_EQ(m.use_of_type(mad.w[1]), kUseAcc);
    EXPECT_EQ(m.use_of_value(mad.w[3]), kUseA);
    EXPECT_EQ(m.use_of_value(mad.w[4]), kUseB);
    EXPECT_EQ(m.use_of_value(mad.w[5]), kUseAcc);
  }
  for (const Inst& load : m.loads) EXPECT_NE(m.use_of_type(load.w[1]), ~0u);
  return m;
}

std::multiset<uint32_t> layouts(const KhrModule& m, const std::vector<Inst>& ops, size_t pos) {
  std::multiset<uint32_t> out;
  for (const Inst& in : ops) out.insert(m.constants.at(in.w[pos]));
  return out;
}

std::multiset<uint32_t> load_uses(const KhrModule& m) {
  std::multiset<uint32_t> out;
  for (const Inst& in : m.loads) out.insert(m.use_of_type(in.w[1]));
  return out;
}

constexpr const char* kPrelude = R"(#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#define F16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
)";

// A 32x32 output tile per subgroup from f16 operands staged in shared memory as uvec4 (8 halves
// per unit): A row-major, B read transposed (column-major), two-by-two f32 accumulators carried
// through the K loop, scaled by alpha and stored through a shared f32 scratch.
const std::string kTiledMatmul = std::string(kPrelude) + R"(
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) readonly buffer B { uvec4 b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform P { uint M, N, K; float alpha; };
shared uvec4 S[2 * 32 * 2 + 2 * 32 * 2];
shared float Cs[256];
void main() {
  const uint tm = gl_WorkGroupID.x * 32u, tn = gl_WorkGroupID.y * 32u;
  F32 acc[2][2];
  for (uint i = 0u; i < 2u; ++i) for (uint j = 0u; j < 2u; ++j) acc[i][j] = F32(0.0);
  for (uint k = 0u; k < K; k += 16u) {
    for (uint u = gl_LocalInvocationID.x; u < 64u; u += 32u) {
      S[u] = a[((tm + u / 2u) * K + k) / 8u + u % 2u];
      S[128u + u] = b[((tn + u / 2u) * K + k) / 8u + u % 2u];
    }
    barrier();
    F16 fa[2];
    F16 fb[2];
    for (uint i = 0u; i < 2u; ++i) coopMatLoadNV(fa[i], S, i * 32u, 2u, false);
    for (uint j = 0u; j < 2u; ++j) coopMatLoadNV(fb[j], S, 128u + j * 32u, 2u, true);
    for (uint i = 0u; i < 2u; ++i) for (uint j = 0u; j < 2u; ++j)
      acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
    barrier();
  }
  for (uint i = 0u; i < 2u; ++i) for (uint j = 0u; j < 2u; ++j) {
    F32 o = acc[i][j] * alpha;
    coopMatStoreNV(o, Cs, 0u, 16u, false);
    barrier();
    for (uint e = gl_LocalInvocationID.x; e < 256u; e += 32u)
      c[(tm + 16u * i + e / 16u) * N + tn + 16u * j + e % 16u] = Cs[e];
    barrier();
  }
}
)";

TEST(SpirvCoopKhr, TiledMatmulOptimized) {
  const KhrModule m = rewrite_and_check(compile(kTiledMatmul, true));
  EXPECT_FALSE(m.muladds.empty());
  EXPECT_FALSE(m.loads.empty());
  EXPECT_EQ(m.stores.size(), 1u);
  // The one NV f16 type is split into an A and a B type; f32 stays an accumulator.
  std::multiset<uint32_t> uses;
  for (const auto& [type, use] : m.type_use) uses.insert(use);
  EXPECT_EQ(uses, (std::multiset<uint32_t>{kUseA, kUseB, kUseAcc}));
  // A is read row-major and B column-major, whatever the loop unrolling.
  for (const Inst& load : m.loads) {
    const uint32_t use = m.use_of_type(load.w[1]);
    ASSERT_TRUE(use == kUseA || use == kUseB);
    EXPECT_EQ(m.constants.at(load.w[4]), use == kUseA ? 0u : 1u);
    EXPECT_EQ(m.constants.at(load.w[5]), 2u);  // the stride survives in its new place
  }
  EXPECT_EQ(layouts(m, m.stores, 3), (std::multiset<uint32_t>{0}));
}

TEST(SpirvCoopKhr, TiledMatmulUnoptimized) {
  // Without optimization the matrices live in Function variables and arrays of them, reached
  // through access chains, loads and stores: those pointer types split too.
  const KhrModule m = rewrite_and_check(compile(kTiledMatmul, false));
  EXPECT_EQ(m.loads.size(), 2u);
  EXPECT_EQ(m.muladds.size(), 1u);
  EXPECT_EQ(load_uses(m), (std::multiset<uint32_t>{kUseA, kUseB}));
  EXPECT_EQ(layouts(m, m.loads, 4), (std::multiset<uint32_t>{0, 1}));
}

// One f16 type as A, B and accumulator at once, f16 -> f32 conversion, element access with
// length(), a value carried through a loop phi, and a fill constant shared by two roles.
const std::string kMixedRoles = std::string(kPrelude) + R"(
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
layout(std430, binding = 1) buffer C { float c[]; };
layout(push_constant) uniform P { uint steps; float scale; };
void main() {
  F16 acc16 = F16(0.0);
  F32 acc32 = F32(0.0);
  for (uint s = 0u; s < steps; ++s) {
    F16 x;
    F16 y;
    coopMatLoadNV(x, a, s * 256u, 16u, false);
    coopMatLoadNV(y, a, s * 256u, 16u, true);
    acc16 = coopMatMulAddNV(x, y, acc16);
#ifdef OPTIMIZED  // spirv-opt 2023.1 crashes folding OpFAdd or OpFNegate of matrices
    acc32 = F32(acc16) * scale;
#else
    acc32 += F32(acc16) * scale;
#endif
  }
  for (int i = 0; i < acc32.length(); ++i) acc32[i] = max(acc32[i], 0.0);
  coopMatStoreNV(acc32, c, 0u, 16u, false);
#ifdef OPTIMIZED
  coopMatStoreNV(acc16 * float16_t(-1.0), a, 0u, 16u, true);
#else
  coopMatStoreNV(-acc16, a, 0u, 16u, true);
#endif
}
)";

TEST(SpirvCoopKhr, OneTypeInThreeRoles) {
  for (bool optimize : {true, false}) {
    SCOPED_TRACE(optimize ? "optimized" : "unoptimized");
    const KhrModule m = rewrite_and_check(compile(kMixedRoles, optimize));
    ASSERT_EQ(m.muladds.size(), 1u);
    // The f16 type becomes three KHR types (A, B, accumulator), the f32 one an accumulator.
    std::multiset<uint32_t> uses;
    for (const auto& [type, use] : m.type_use) uses.insert(use);
    EXPECT_EQ(uses, (std::multiset<uint32_t>{kUseA, kUseB, kUseAcc, kUseAcc}));
    EXPECT_EQ(load_uses(m), (std::multiset<uint32_t>{kUseA, kUseB}));
    EXPECT_EQ(layouts(m, m.loads, 4), (std::multiset<uint32_t>{0, 1}));
    EXPECT_EQ(layouts(m, m.stores, 3), (std::multiset<uint32_t>{0, 1}));
    for (const Inst& store : m.stores) EXPECT_EQ(m.use_of_value(store.w[2]), kUseAcc);
    ASSERT_EQ(m.lengths.size(), 1u);
    EXPECT_EQ(m.use_of_type(m.lengths[0].w[3]), kUseAcc);
  }
}

// Signed and unsigned 8-bit products: KHR says signedness in the MulAdd operands.
const std::string kInt8Matmul = R"(#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_8bit_storage : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { int8_t a[]; };
layout(std430, binding = 1) buffer B { uint8_t b[]; };
layout(std430, binding = 2) buffer C { int c[]; };
layout(std430, binding = 3) buffer D { uint d[]; };
void main() {
  icoopmatNV<8, gl_ScopeSubgroup, 16, 32> x;
  icoopmatNV<8, gl_ScopeSubgroup, 32, 16> y;
  icoopmatNV<32, gl_ScopeSubgroup, 16, 16> z;
  coopMatLoadNV(x, a, 0u, 32u, false);
  coopMatLoadNV(y, a, 512u, 16u, false);
  coopMatLoadNV(z, c, 0u, 16u, false);
  z = coopMatMulAddNV(x, y, z);
  coopMatStoreNV(z, c, 0u, 16u, false);
  ucoopmatNV<8, gl_ScopeSubgroup, 16, 32> ux;
  ucoopmatNV<8, gl_ScopeSubgroup, 32, 16> uy;
  ucoopmatNV<32, gl_ScopeSubgroup, 16, 16> uz = ucoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0u);
  coopMatLoadNV(ux, b, 0u, 32u, false);
  coopMatLoadNV(uy, b, 512u, 16u, false);
  uz = coopMatMulAddNV(ux, uy, uz);
  coopMatStoreNV(uz, d, 0u, 16u, false);
}
)";

TEST(SpirvCoopKhr, IntegerMatmulGetsSignedness) {
  const KhrModule m = rewrite_and_check(compile(kInt8Matmul, true));
  ASSERT_EQ(m.muladds.size(), 2u);
  // int8 x int8 + int32: every operand signed; the unsigned product has no operands mask.
  ASSERT_EQ(m.muladds[0].w.size(), 7u);
  EXPECT_EQ(m.muladds[0].w[6], 0x1u | 0x2u | 0x4u | 0x8u);
  EXPECT_EQ(m.muladds[1].w.size(), 6u);
  EXPECT_EQ(load_uses(m), (std::multiset<uint32_t>{kUseA, kUseB, kUseAcc, kUseA, kUseB}));
}

TEST(SpirvCoopKhr, FloatMatmulHasNoOperandsMask) {
  const KhrModule m = rewrite_and_check(compile(kTiledMatmul, false));
  ASSERT_EQ(m.muladds.size(), 1u);
  EXPECT_EQ(m.muladds[0].w.size(), 6u);
}

TEST(SpirvCoopKhr, ModuleWithoutCooperativeMatricesIsUnchanged) {
  const auto spirv = compile(R"(#version 450
layout(local_size_x = 64) in;
layout(binding = 0) buffer B { float b[]; };
void main() { b[gl_GlobalInvocationID.x] *= 2.0; }
)",
                             true);
  EXPECT_FALSE(uses_nv_cooperative_matrix(spirv));
  EXPECT_EQ(rewrite_nv_coop_to_khr(spirv), spirv);
  // A rewritten module has nothing left to rewrite.
  const auto khr = rewrite_nv_coop_to_khr(compile(kTiledMatmul, true));
  EXPECT_EQ(rewrite_nv_coop_to_khr(khr), khr);
}

void expect_error(const std::vector<uint32_t>& words, const std::string& fragment) {
  try {
    rewrite_nv_coop_to_khr(words);
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SpirvCoopKhr, MalformedInputIsAnError) {
  expect_error({}, "shorter than its 5-word header");
  expect_error({1, 2, 3, 4, 5, 6, 7}, "not a SPIR-V module");
  std::vector<uint32_t> spirv = compile(kTiledMatmul, true);
  // An instruction whose word count runs past the end.
  std::vector<uint32_t> truncated = spirv;
  truncated.back() = (5u << 16) | (truncated.back() & 0xffff);
  expect_error(truncated, "words remain");
  // A zero word count.
  std::vector<uint32_t> zero = spirv;
  zero[5] = 0;
  expect_error(zero, "word count 0");
  // An id past the bound.
  std::vector<uint32_t> small_bound = spirv;
  small_bound[3] = 4;
  expect_error(small_bound, "outside the bound");
}

TEST(SpirvCoopKhr, OneValueAsTwoUsesIsAnError) {
  const std::string square = std::string(kPrelude) + R"(
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
void main() {
  F16 x;
  coopMatLoadNV(x, a, 0u, 16u, false);
  F16 y = coopMatMulAddNV(x, x, F16(0.0));
  coopMatStoreNV(y, a, 0u, 16u, false);
}
)";
  for (bool optimize : {true, false}) {
    expect_error(compile(square, optimize), "both MatrixA and MatrixB");
  }
}

TEST(SpirvCoopKhr, AmbiguousLengthIsAnError) {
  const std::string source = std::string(kPrelude) + R"(
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
layout(std430, binding = 1) buffer L { int len; };
void main() {
  F16 x, y;
  coopMatLoadNV(x, a, 0u, 16u, false);
  coopMatLoadNV(y, a, 256u, 16u, false);
  F16 z = coopMatMulAddNV(x, y, F16(0.0));
  len = z.length();
  coopMatStoreNV(z, a, 0u, 16u, false);
}
)";
  expect_error(compile(source, true), "ambiguous");
}

TEST(SpirvCoopKhr, ConstantsAreCopiedPerUse) {
  // One fill constant as A and as C of the same MulAdd: two KHR constants of two types.
  const std::string source = std::string(kPrelude) + R"(
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
void main() {
  F16 y;
  coopMatLoadNV(y, a, 0u, 16u, false);
  F16 r = coopMatMulAddNV(F16(1.0), y, F16(1.0));
  coopMatStoreNV(r, a, 0u, 16u, false);
}
)";
  for (bool optimize : {true, false}) {
    const KhrModule m = rewrite_and_check(compile(source, optimize));
    ASSERT_EQ(m.muladds.size(), 1u);
    EXPECT_NE(m.muladds[0].w[3], m.muladds[0].w[5]);
    EXPECT_EQ(m.use_of_value(m.muladds[0].w[3]), kUseA);
  }
}

TEST(SpirvCoopKhr, FunctionsTakingMatricesNeedInlining) {
  const std::string source = std::string(kPrelude) + R"(
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer A { float16_t a[]; };
F16 twice(F16 x) { return x * float16_t(2.0); }
void main() {
  F16 y;
  coopMatLoadNV(y, a, 0u, 16u, false);
  coopMatStoreNV(twice(y), a, 0u, 16u, false);
}
)";
  rewrite_and_check(compile(source, true));  // inlined by the optimizer
  expect_error(compile(source, false), "function signatures");
}

// Edits one instruction of a compiled module: the first with opcode `from` gets opcode `to`.
std::vector<uint32_t> with_opcode(std::vector<uint32_t> spirv, uint32_t from, uint32_t to) {
  for (size_t at = 5; at < spirv.size(); at += spirv[at] >> 16) {
    if ((spirv[at] & 0xffff) == from) {
      spirv[at] = (spirv[at] & 0xffff0000u) | to;
      return spirv;
    }
  }
  ADD_FAILURE() << "no opcode " << from;
  return spirv;
}

TEST(SpirvCoopKhr, ConstructsWithoutAKhrFormAreErrors) {
  const std::vector<uint32_t> spirv = compile(kTiledMatmul, true);
  // A column-major flag that is a specialization constant has no constant KHR layout.
  constexpr uint32_t kOpSpecConstantTrue = 48, kOpMatrixTimesScalar = 143,
                     kOpVectorTimesScalar = 142;
  expect_error(with_opcode(spirv, kOpConstantTrue, kOpSpecConstantTrue), "column-major operand");
  // An instruction producing a matrix that the pass has no rule for.
  expect_error(with_opcode(spirv, kOpMatrixTimesScalar, kOpVectorTimesScalar), "no rule");
}

TEST(SpirvCoopKhr, CompilerOptionRewritesAndKeysTheCache) {
  CompileOptions options;
  options.target = TargetEnv::vulkan_1_3;
  const auto nv = compile_glsl(kTiledMatmul, options);
  options.coop_khr = true;
  const auto khr = compile_glsl(kTiledMatmul, options);
  EXPECT_TRUE(uses_nv_cooperative_matrix(nv));
  EXPECT_FALSE(uses_nv_cooperative_matrix(khr));
  EXPECT_EQ(khr, rewrite_nv_coop_to_khr(nv));
  CompileOptions plain = options;
  plain.coop_khr = false;
  EXPECT_NE(shader_cache_key(kTiledMatmul, options), shader_cache_key(kTiledMatmul, plain));
}

// On a GPU with cooperative matrices (skipped elsewhere, e.g. on lavapipe): the tiled matmul,
// rewritten to KHR, computes the same product as the CPU and as the NV module.
bool has_f16_config(const std::vector<vk::CooperativeMatrixConfig>& configs) {
  for (const auto& c : configs) {
    if (c.m == 16 && c.n == 16 && c.k == 16 && c.a_type == "f16" && c.b_type == "f16" &&
        c.c_type == "f32" && c.result_type == "f32" && c.scope == "subgroup") {
      return true;
    }
  }
  return false;
}

// Exactly representable values (k/8, |k| <= 8) as IEEE half bits.
uint16_t half_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffff) == 0) return static_cast<uint16_t>(b >> 16);
  return static_cast<uint16_t>(((b >> 16) & 0x8000) | ((((b >> 23) & 0xff) - 112) << 10) |
                               ((b >> 13) & 0x3ff));
}

struct MatmulParams {
  uint32_t m, n, k;
  float alpha;
};

std::vector<float> run_tiled_matmul(vk::Device& device, bool khr, const std::vector<float>& a,
                                    const std::vector<float>& b, const MatmulParams& p) {
  CompileOptions options;
  options.target = target_env_for(device.capabilities().api_version);
  options.coop_khr = khr;
  options.name = khr ? "tiled_matmul_khr" : "tiled_matmul_nv";
  const std::vector<uint32_t> spirv = compile_glsl(kTiledMatmul, options);
  EXPECT_EQ(uses_nv_cooperative_matrix(spirv), !khr);
  vk::KernelInterface k;
  k.buffer_count = 3;
  k.push_constant_bytes = sizeof(MatmulParams);
  k.workgroup_size = {32, 1, 1};
  vk::Pipeline pipeline(device, spirv, k, options.name);

  auto halves = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = half_bits(v[i]);
    return h;
  };
  const std::vector<uint16_t> ha = halves(a), hb = halves(b);
  auto aligned = [](uint64_t x) { return (x + 255) / 256 * 256; };
  const uint64_t a_bytes = ha.size() * 2, b_bytes = hb.size() * 2, c_bytes = p.m * p.n * 4;
  const uint64_t b_at = aligned(a_bytes), c_at = b_at + aligned(b_bytes);
  vk::Arena arena(device, c_at + c_bytes);
  arena.write(0, std::as_bytes(std::span(ha)));
  arena.write(b_at, std::as_bytes(std::span(hb)));
  vk::Recording rec(device, {false, options.name});
  vk::Dispatch d;
  d.pipeline = &pipeline;
  d.buffers = {{arena.range(0, a_bytes), vk::Access::read},
               {arena.range(b_at, b_bytes), vk::Access::read},
               {arena.range(c_at, c_bytes), vk::Access::write}};
  d.set_push_constants(p);
  d.groups = {p.m / 32, p.n / 32, 1};
  rec.dispatch(std::move(d));
  rec.run();
  std::vector<float> c(p.m * p.n);
  arena.read(c_at, std::as_writable_bytes(std::span(c)));
  return c;
}

TEST(SpirvCoopKhrGpu, TiledMatmulMatchesTheCpu) {
  // The validation layer of Vulkan SDK 1.3.239 validates SPIR-V with a SPIRV-Tools that does
  // not know SPV_KHR_cooperative_matrix and would reject every KHR module, so it stays off.
  vk::DeviceOptions options;
  options.validation = false;
  options.persistent_pipeline_cache = false;
  std::unique_ptr<vk::Device> device;
  try {
    device = std::make_unique<vk::Device>(options);
  } catch (const DeviceError& e) {
    GTEST_SKIP() << "no Vulkan device: " << e.what();
  }
  const auto& caps = device->capabilities();
  const bool khr = caps.cooperative_matrix.khr_feature &&
                   has_f16_config(caps.cooperative_matrix.khr_configs) &&
                   caps.vulkan_memory_model && caps.types.float16;
  if (!khr) GTEST_SKIP() << caps.name << " has no KHR f16 16x16x16 cooperative matrices";
  const bool nv =
      caps.cooperative_matrix.nv_feature && has_f16_config(caps.cooperative_matrix.nv_configs);

  const MatmulParams p{128, 96, 256, 0.5f};
  std::vector<float> a(p.m * p.k), b(p.n * p.k);  // A is MxK, B is NxK (read transposed)
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>((state >> 16) % 17) - 8) / 8.0f;
  };
  for (float& x : a) x = next();
  for (float& x : b) x = next();
  std::vector<float> expected(p.m * p.n);
  for (uint32_t i = 0; i < p.m; ++i) {
    for (uint32_t j = 0; j < p.n; ++j) {
      double sum = 0;
      for (uint32_t k = 0; k < p.k; ++k) sum += double(a[i * p.k + k]) * b[j * p.k + k];
      expected[i * p.n + j] = static_cast<float>(sum * p.alpha);
    }
  }
  // Products of k/8 values summed in f32 are exact: any difference is a wrong element.
  const std::vector<float> got = run_tiled_matmul(*device, true, a, b, p);
  for (size_t e = 0; e < got.size(); ++e) {
    ASSERT_EQ(got[e], expected[e]) << "KHR, element (" << e / p.n << ", " << e % p.n << ")";
  }
  if (nv) EXPECT_EQ(run_tiled_matmul(*device, false, a, b, p), got);
  std::printf("KHR tiled matmul on %s matches the CPU%s\n", caps.name.c_str(),
              nv ? " and the NV module" : "");
}

}  // namespace
}  // namespace mn::codegen
