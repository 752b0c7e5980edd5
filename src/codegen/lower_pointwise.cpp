// Elementwise ops: one thread per output element, operands read through broadcast offsets.
#include <map>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "ir/ops/elementwise.h"

namespace mn::codegen {

namespace {

// Functions the expressions below may call, shared by every pointwise kernel.
const char* kMathLibrary = R"(
float mn_tanh(float x) { float e = exp(-2.0 * abs(x)); return sign(x) * (1.0 - e) / (1.0 + e); }
float mn_sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }
// erf with |error| < 1.2e-7 (Numerical Recipes' erfc Chebyshev fit).
float mn_erf(float x) {
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
            t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
            t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0.0 ? 1.0 - r : r - 1.0;
}
float mn_pow(float a, float b) {
  if (b == 0.0) return 1.0;
  if (a >= 0.0) return pow(a, b);
  float r = round(b);
  if (r != b) return uintBitsToFloat(0x7fc00000u);
  float m = pow(-a, b);
  return mod(r, 2.0) != 0.0 ? -m : m;
}
float mn_softplus(float x, float beta, float threshold) {
  float z = beta * x;
  if (z > threshold) return x;
  return (z < -15.0 ? exp(z) : log(1.0 + exp(z))) / beta;
}
)";

struct PointwiseSpec {
  int arity;
  // GLSL expression of a, b, c (floats), given the node (attributes).
  std::function<std::string(const Node&)> expr;
  // Integer form over ia, ib, ic (ints), for i32/u32 operands; empty: not for integers.
  std::string int_expr = {};
};

std::string lit(double v) { return glsl::float_literal(v); }

const std::map<std::string, PointwiseSpec>& specs() {
  auto fixed = [](const std::string& e) { return [e](const Node&) { return e; }; };
  static const std::map<std::string, PointwiseSpec> m = {
      {"add", {2, fixed("a + b"), "ia + ib"}},
      {"sub", {2, fixed("a - b"), "ia - ib"}},
      {"mul", {2, fixed("a * b"), "ia * ib"}},
      {"div", {2, fixed("a / b")}},
      {"pow", {2, fixed("mn_pow(a, b)")}},
      {"maximum", {2, fixed("(isnan(a) || isnan(b)) ? a + b : max(a, b)"), "max(ia, ib)"}},
      {"minimum", {2, fixed("(isnan(a) || isnan(b)) ? a + b : min(a, b)"), "min(ia, ib)"}},
      {"eq", {2, fixed("float(a == b)"), "int(ia == ib)"}},
      {"ne", {2, fixed("float(a != b)"), "int(ia != ib)"}},
      {"lt", {2, fixed("float(a < b)"), "int(ia < ib)"}},
      {"le", {2, fixed("float(a <= b)"), "int(ia <= ib)"}},
      {"gt", {2, fixed("float(a > b)"), "int(ia > ib)"}},
      {"ge", {2, fixed("float(a >= b)"), "int(ia >= ib)"}},
      {"neg", {1, fixed("-a"), "-ia"}},
      {"abs", {1, fixed("abs(a)"), "abs(ia)"}},
      {"exp", {1, fixed("exp(a)")}},
      {"log", {1, fixed("log(a)")}},
      {"sqrt", {1, fixed("sqrt(a)")}},
      {"rsqrt", {1, fixed("inversesqrt(a)")}},
      {"sin", {1, fixed("sin(a)")}},
      {"cos", {1, fixed("cos(a)")}},
      {"tanh", {1, fixed("mn_tanh(a)")}},
      {"erf", {1, fixed("mn_erf(a)")}},
      {"sigmoid", {1, fixed("mn_sigmoid(a)")}},
      {"relu", {1, fixed("a > 0.0 ? a : 0.0")}},
      {"silu", {1, fixed("a * mn_sigmoid(a)")}},
      {"stop_gradient", {1, fixed("a"), "ia"}},
      {"leaky_relu",
       {1, [](const Node& n) {
          return "a > 0.0 ? a : a * " + lit(n.attrs.as<LeakyReluAttrs>().negative_slope);
        }}},
      {"gelu",
       {1, [](const Node& n) -> std::string {
          if (n.attrs.as<GeluAttrs>().approximate == GeluApprox::tanh) {
            return "0.5 * a * (1.0 + mn_tanh(0.7978845608 * (a + 0.044715 * a * a * a)))";
          }
          return "0.5 * a * (1.0 + mn_erf(a * 0.7071067812))";
        }}},
      {"softplus",
       {1, [](const Node& n) {
          const auto& s = n.attrs.as<SoftplusAttrs>();
          return "mn_softplus(a, " + lit(s.beta) + ", " + lit(s.threshold) + ")";
        }}},
      {"clamp",
       {1, [](const Node& n) {
          const auto& c = n.attrs.as<ClampAttrs>();
          return "min(max(a, " + lit(c.lo) + "), " + lit(c.hi) + ")";
        }}},
      {"cast", {1, fixed("a"), "ia"}},
      {"where", {3, fixed("a != 0.0 ? b : c"), "a != 0.0 ? ib : ic"}},
  };
  return m;
}

Lowering lower_pointwise(const LowerContext& ctx, const PointwiseSpec& spec) {
  const Node& n = ctx.node;
  const Shape& out = n.type.shape;
  const uint64_t count = static_cast<uint64_t>(n.type.numel());
  const char* names[] = {"a", "b", "c"};
  // Integer arithmetic only when the values and the result are integers (cast between int and
  // float goes through the float path, which truncates on store as the reference does).
  // where's condition is always read as a float: nonzero selects.
  const bool is_where = n.op_name() == "where";
  bool ints = !spec.int_expr.empty() && !is_float(n.type.dtype);
  for (size_t i = is_where ? 1 : 0; i < ctx.inputs.size(); ++i) ints = ints && !is_float(ctx.inputs[i].dtype);

  std::string decl;
  KernelLaunch k;
  k.name = std::string(n.op_name());
  for (int i = 0; i < spec.arity; ++i) {
    decl += glsl::buffer(static_cast<uint32_t>(i), ctx.inputs[i].dtype, std::string("in") + names[i], true);
    k.bindings.push_back({ArgRef::input(i), false});
  }
  decl += glsl::buffer(static_cast<uint32_t>(spec.arity), n.type.dtype, "out", false);
  k.bindings.push_back({ArgRef::output(), true});
  decl += kMathLibrary;

  bool need_coords = false;
  for (const TensorType& t : ctx.inputs) need_coords = need_coords || t.shape != out;
  std::string body = need_coords ? glsl::unravel(out, "i", "p") : "";
  for (int i = 0; i < spec.arity; ++i) {
    std::string off = ctx.inputs[i].shape == out ? "i" : glsl::broadcast_offset(ctx.inputs[i].shape, out, "p");
    if (ints && !(is_where && i == 0)) {
      body += std::string("  int i") + names[i] + " = in" + names[i] + "_ldi(" + off + ");\n";
    } else {
      body += std::string("  float ") + names[i] + " = in" + names[i] + "_ld(" + off + ");\n";
    }
  }
  if (ints) {
    body += "  out_sti(i, " + spec.int_expr + ");\n";
  } else {
    body += "  out_st(i, " + spec.expr(n) + ");\n";
  }
  auto grid = glsl::linear_grid(count, ctx.device);
  k.glsl = glsl::elementwise_kernel(decl, body, count);
  k.workgroup = {grid.local, 1, 1};
  k.groups = grid.groups;
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace

void register_pointwise_lowerings(LoweringRegistry& r) {
  for (const auto& [name, spec] : specs()) {
    r.add(name, [&spec = spec](const LowerContext& ctx) { return lower_pointwise(ctx, spec); });
  }
}

}  // namespace mn::codegen
