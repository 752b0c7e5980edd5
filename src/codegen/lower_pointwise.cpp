// Elementwise ops: one thread per output element, operands read through broadcast offsets.
// Values compute in f32, except integer operands, which stay integers (i32 as int, u32 as uint)
// so that values past 2^24 keep every bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "codegen/fused_pointwise.h"
#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "ir/ops/elementwise.h"

namespace mn::codegen {

namespace {

// Functions the expressions below may call, shared by every pointwise kernel. The builtins'
// precision is loose where it matters (tanh and erf near 0, log(1 + tiny), sin of large
// arguments), so those are written out to stay within a few f32 ulps of the reference.
const char* kMathLibrary = R"(
bool mn_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
float mn_tanh(float x) {
  float z = abs(x);
  if (z < 0.5) {
    float x2 = x * x;
    return x + x * x2 * (-0.33333333333 + x2 * (0.13333333333 + x2 * (-0.053968253968 +
           x2 * (0.021869488536 + x2 * (-0.0088632355299 + x2 * 0.0035921280366)))));
  }
  float e = exp(-2.0 * z);
  float t = (1.0 - e) / (1.0 + e);
  return x < 0.0 ? -t : t;
}
float mn_sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }
// erfc with fractional error < 1.2e-7 (Numerical Recipes' Chebyshev fit).
float mn_erfc(float x) {
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
            t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
            t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0.0 ? r : 2.0 - r;
}
// erf: its Taylor series near 0 (where 1 - erfc cancels), 1 - erfc elsewhere.
float mn_erf(float x) {
  if (abs(x) < 0.5) {
    float x2 = x * x;
    return x * 1.1283791671 * (1.0 + x2 * (-0.33333333333 + x2 * (0.1 + x2 * (-0.023809523810 +
           x2 * (0.0046296296296 + x2 * (-0.00075757575758 + x2 * 0.00010683760684))))));
  }
  return x >= 0.0 ? 1.0 - mn_erfc(x) : mn_erfc(-x) - 1.0;
}
// log(1 + y) for y in [0, 1], as 2 atanh(y / (2 + y)).
float mn_log1p_unit(float y) {
  float s = y / (2.0 + y), s2 = s * s;
  return 2.0 * s * (1.0 + s2 * (0.33333333333 + s2 * (0.2 + s2 * (0.14285714286 + s2 *
         (0.11111111111 + s2 * (0.090909090909 + s2 * (0.076923076923 + s2 * 0.066666666667)))))));
}
float mn_softplus(float x, float beta, float threshold) {
  float z = beta * x;
  if (z > threshold) return x;
  return (max(z, 0.0) + mn_log1p_unit(exp(-abs(z)))) / beta;
}
// x - k 2pi with 2pi split in three (Cody-Waite): the first two products are exact for
// |x| < 4e5, so large angles (positions times frequencies) keep their accuracy.
float mn_reduce_angle(float x) {
  float k = round(x * 0.15915494309);
  return ((x - k * 6.28125) - k * 0.0019378662109375) - k * -2.5590313726e-06;
}
float mn_sin(float x) { return sin(mn_reduce_angle(x)); }
float mn_cos(float x) { return cos(mn_reduce_angle(x)); }
float mn_pow(float a, float b) {
  if (b == 0.0) return 1.0;
  float r = round(b);
  bool odd = r == b && mod(r, 2.0) != 0.0;
  if (a == 0.0) {
    float m = b > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
    return odd && floatBitsToUint(a) != 0u ? -m : m;
  }
  if (a > 0.0) return pow(a, b);
  if (r != b) return uintBitsToFloat(0x7fc00000u);
  float m = pow(-a, b);
  return odd ? -m : m;
}
)";

// An integer form of an op: `i` for i32 operands (ia, ib, ic are ints), `u` for u32 operands
// (uints). u32 results that would be negative are 0, as the reference stores them.
struct IntForm {
  std::string i, u;
};

struct PointwiseSpec {
  int arity;
  // GLSL expression of a, b, c (floats), given the node (attributes).
  std::function<std::string(const Node&)> expr;
  // For i32/u32 operands; nullptr: integers go through the float expression.
  std::function<IntForm(const Node&)> int_form = nullptr;
};

std::string lit(double v) { return glsl::float_literal(v); }

std::function<IntForm(const Node&)> same_int(const std::string& i, const std::string& u) {
  return [i, u](const Node&) { return IntForm{i, u}; };
}
std::function<IntForm(const Node&)> same_int(const std::string& e) { return same_int(e, e); }

// An integral bound as a literal of the operand type, saturated to its range.
std::string int_bound(double v, bool is_unsigned) {
  if (is_unsigned) {
    v = std::clamp(v, 0.0, static_cast<double>(std::numeric_limits<uint32_t>::max()));
    return std::to_string(static_cast<uint32_t>(v)) + "u";
  }
  v = std::clamp(v, static_cast<double>(std::numeric_limits<int32_t>::min()),
                 static_cast<double>(std::numeric_limits<int32_t>::max()));
  const auto i = static_cast<int64_t>(v);
  // -2147483648 is not a GLSL literal (the minus applies to an out-of-range 2147483648).
  return i == std::numeric_limits<int32_t>::min() ? "(-2147483647 - 1)" : std::to_string(i);
}

const std::map<std::string, PointwiseSpec>& specs() {
  auto fixed = [](const std::string& e) { return [e](const Node&) { return e; }; };
  static const std::map<std::string, PointwiseSpec> m = {
      {"add", {2, fixed("a + b"), same_int("ia + ib")}},
      {"sub", {2, fixed("a - b"), same_int("ia - ib", "(ia > ib ? ia - ib : 0u)")}},
      {"mul", {2, fixed("a * b"), same_int("ia * ib")}},
      {"div", {2, fixed("a / b")}},
      {"pow", {2, fixed("mn_pow(a, b)")}},
      // The reference's rule: a NaN operand wins, a tie returns b.
      {"maximum",
       {2, fixed("mn_isnan(a) ? a : (mn_isnan(b) ? b : (a > b ? a : b))"),
        same_int("max(ia, ib)")}},
      {"minimum",
       {2, fixed("mn_isnan(a) ? a : (mn_isnan(b) ? b : (a < b ? a : b))"),
        same_int("min(ia, ib)")}},
      {"eq", {2, fixed("float(a == b)"), same_int("int(ia == ib)")}},
      {"ne", {2, fixed("float(a != b)"), same_int("int(ia != ib)")}},
      {"lt", {2, fixed("float(a < b)"), same_int("int(ia < ib)")}},
      {"le", {2, fixed("float(a <= b)"), same_int("int(ia <= ib)")}},
      {"gt", {2, fixed("float(a > b)"), same_int("int(ia > ib)")}},
      {"ge", {2, fixed("float(a >= b)"), same_int("int(ia >= ib)")}},
      {"neg", {1, fixed("-a"), same_int("-ia", "0u")}},
      {"abs", {1, fixed("abs(a)"), same_int("abs(ia)", "ia")}},
      {"exp", {1, fixed("exp(a)")}},
      {"log", {1, fixed("log(a)")}},
      {"sqrt", {1, fixed("sqrt(a)")}},
      {"rsqrt", {1, fixed("inversesqrt(a)")}},
      {"sin", {1, fixed("mn_sin(a)")}},
      {"cos", {1, fixed("mn_cos(a)")}},
      {"tanh", {1, fixed("mn_tanh(a)")}},
      {"erf", {1, fixed("mn_erf(a)")}},
      {"sigmoid", {1, fixed("mn_sigmoid(a)")}},
      {"relu", {1, fixed("a > 0.0 ? a : 0.0")}},
      {"silu", {1, fixed("a * mn_sigmoid(a)")}},
      {"stop_gradient", {1, fixed("a"), same_int("ia")}},
      {"leaky_relu",
       {1,
        [](const Node& n) {
          return "a > 0.0 ? a : a * " + lit(n.attrs.as<LeakyReluAttrs>().negative_slope);
        }}},
      {"gelu",
       {1,
        [](const Node& n) -> std::string {
          // Both forms without the cancellation of 1 + (something near -1) for negative a:
          // 0.5 (1 + tanh u) = 1 / (1 + e^-2u) and 1 + erf(z) = erfc(-z).
          if (n.attrs.as<GeluAttrs>().approximate == GeluApprox::tanh) {
            return "a / (1.0 + exp(-2.0 * " + lit(0.7978845608028654) + " * (a + " + lit(0.044715) +
                   " * a * a * a)))";
          }
          return "0.5 * a * mn_erfc(a * " + lit(-0.7071067811865476) + ")";
        }}},
      {"softplus",
       {1,
        [](const Node& n) {
          const auto& s = n.attrs.as<SoftplusAttrs>();
          return "mn_softplus(a, " + lit(s.beta) + ", " + lit(s.threshold) + ")";
        }}},
      {"clamp",
       {1,
        [](const Node& n) {
          const auto& c = n.attrs.as<ClampAttrs>();
          // GLSL's min/max may drop a NaN; the reference keeps it.
          return "mn_isnan(a) ? a : min(max(a, " + lit(c.lo) + "), " + lit(c.hi) + ")";
        },
        [](const Node& n) {
          const auto& c = n.attrs.as<ClampAttrs>();
          return IntForm{
              "clamp(ia, " + int_bound(c.lo, false) + ", " + int_bound(c.hi, false) + ")",
              "clamp(ia, " + int_bound(c.lo, true) + ", " + int_bound(c.hi, true) + ")"};
        }}},
      // A cast to f16/bf16 rounds in registers as its store would (the value then fits the
      // dtype exactly), so fused kernels see what the reference and a stored tensor hold.
      // Between integer types only (see lower_pointwise): i32 -> u32 stores negatives as 0.
      {"cast",
       {1,
        [](const Node& n) -> std::string {
          if (n.type.dtype == DType::bf16) return "mn_bf16_to_f32(mn_f32_to_bf16(a))";
          if (n.type.dtype == DType::f16) return "mn_f16_to_f32(mn_f32_to_f16(a))";
          return "a";
        },
        [](const Node& n) {
          return IntForm{n.type.dtype == DType::u32 ? "max(ia, 0)" : "ia", "ia"};
        }}},
      {"where", {3, fixed("a != 0.0 ? b : c"), same_int("a != 0.0 ? ib : ic")}},
  };
  return m;
}

Lowering lower_pointwise(const LowerContext& ctx, const PointwiseSpec& spec) {
  glsl::require_storage(ctx);
  const Node& n = ctx.node;
  const Shape& out = n.type.shape;
  const uint64_t count = static_cast<uint64_t>(n.type.numel());
  const char* names[] = {"a", "b", "c"};
  // Integer arithmetic when the value operands are integers (binary ops and where's branches
  // share one dtype). where's condition is always read as a float: nonzero selects. A cast
  // between integer and float goes through the float path (truncating on store as the
  // reference does).
  const bool is_where = n.op_name() == "where";
  const DType operand = ctx.inputs[is_where ? 1 : 0].dtype;
  const bool is_cast = n.op_name() == "cast";
  const bool ints = spec.int_form && !is_float(operand) && !(is_cast && is_float(n.type.dtype));
  const bool is_unsigned = operand == DType::u32;

  std::string decl;
  KernelLaunch k;
  k.name = std::string(n.op_name());
  for (int i = 0; i < spec.arity; ++i) {
    decl += glsl::buffer(static_cast<uint32_t>(i), ctx.inputs[i].dtype,
                         std::string("in") + names[i], true);
    k.bindings.push_back({ArgRef::input(i), false});
  }
  decl += glsl::buffer(static_cast<uint32_t>(spec.arity), n.type.dtype, "out", false);
  k.bindings.push_back({ArgRef::output(), true});
  decl += pointwise_math_library();

  // The op as a function of its operand values, storing element i.
  auto operand_type = [&](int i) -> std::string {
    if (!ints || (is_where && i == 0)) return "float";
    return is_unsigned ? "uint" : "int";
  };
  auto operand_name = [&](int i) {
    return (operand_type(i) == "float" ? "" : "i") + std::string(names[i]);
  };
  decl += "void mn_store(uint i";
  for (int i = 0; i < spec.arity; ++i) decl += ", " + operand_type(i) + " " + operand_name(i);
  decl += ") {\n";
  if (ints) {
    const IntForm f = spec.int_form(n);
    const std::string e = is_unsigned ? f.u : f.i;
    // Comparisons of integers hold 0/1 in a float output.
    decl += is_float(n.type.dtype) ? "  out_st(i, float(" + e + "));\n"
                                   : "  out_sti(i, int(" + e + "));\n";
  } else {
    decl += "  out_st(i, " + spec.expr(n) + ");\n";
  }
  decl += "}\n";

  // Large tensors take `per_thread` elements a thread, all loaded before any is stored (the
  // output may alias nothing, but the compiler cannot know): one load in flight per thread
  // leaves a large GPU's memory latency-bound at half its bandwidth. Element j of a group's
  // span is lane + local * j, so every load and store instruction stays coalesced.
  const uint32_t local = 256;
  const uint32_t per_thread = count >= 65536 ? 4 : 1;
  bool need_coords = false;
  for (const TensorType& t : ctx.inputs) need_coords = need_coords || t.shape != out;
  std::string body = "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  for (uint32_t j = 0; j < per_thread; ++j) {
    const std::string J = std::to_string(j), e = "e" + J;
    body += "  uint " + e + " = (g * " + std::to_string(per_thread) + "u + " + J + "u) * " +
            std::to_string(local) + "u + gl_LocalInvocationID.x;\n";
    body += "  bool v" + J + " = " + e + " < " + std::to_string(count) + "u;\n";
    if (need_coords) body += glsl::unravel(out, e, "p" + J + "_");
    for (int i = 0; i < spec.arity; ++i) {
      const std::string off = ctx.inputs[i].shape == out
                                  ? e
                                  : glsl::broadcast_offset(ctx.inputs[i].shape, out, "p" + J + "_");
      const std::string load = std::string("in") + names[i];
      const std::string type = operand_type(i);
      const std::string value = type == "float" ? load + "_ld(" + off + ")"
                                : type == "int" ? load + "_ldi(" + off + ")"
                                                : "uint(" + load + "_ldi(" + off + "))";
      body += "  " + type + " " + operand_name(i) + J + " = v" + J + " ? " + value + " : " + type +
              "(0);\n";
    }
  }
  for (uint32_t j = 0; j < per_thread; ++j) {
    const std::string J = std::to_string(j);
    body += "  if (v" + J + ") mn_store(e" + J;
    for (int i = 0; i < spec.arity; ++i) body += ", " + operand_name(i) + J;
    body += ");\n";
  }
  auto grid = glsl::linear_grid((count + per_thread - 1) / per_thread, ctx.device, local);
  k.glsl = glsl::header() + decl + "void main() {\n" + body + "}\n";
  k.workgroup = {local, 1, 1};
  k.groups = grid.groups;
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace

std::optional<std::string> pointwise_expression(const Node& node) {
  auto it = specs().find(std::string(node.op_name()));
  if (it == specs().end()) return std::nullopt;
  return it->second.expr(node);
}

const char* pointwise_math_library() {
  // The 16-bit conversions for casts evaluated in registers (see "cast" above).
  static const std::string library = std::string(glsl::half_conversions()) + kMathLibrary;
  return library.c_str();
}

bool fusable_pointwise(const Node& node, std::span<const TensorType> inputs) {
  auto it = specs().find(std::string(node.op_name()));
  if (it == specs().end() || it->second.arity != static_cast<int>(inputs.size())) return false;
  // Casts between the float formats: loads widen exactly, 16-bit results round in registers.
  auto float_format = [](DType t) {
    return t == DType::f32 || t == DType::f16 || t == DType::bf16;
  };
  if (node.op_name() == "cast") return float_format(node.type.dtype) && float_format(inputs[0].dtype);
  if (node.type.dtype != DType::f32) return false;
  return std::all_of(inputs.begin(), inputs.end(),
                     [](const TensorType& t) { return t.dtype == DType::f32; });
}

void register_pointwise_lowerings(LoweringRegistry& r) {
  for (const auto& [name, spec] : specs()) {
    r.add(name, [&spec = spec](const LowerContext& ctx) { return lower_pointwise(ctx, spec); });
  }
}

}  // namespace mn::codegen
