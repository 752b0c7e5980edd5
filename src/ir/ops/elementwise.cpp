// Elementwise ops: arithmetic with numpy broadcasting, activations, comparisons, select and casts.
// Every gradient is the exact derivative of the reference evaluation, and kinks follow PyTorch
// (relu'(0) = 0, clamp passes the gradient on its closed interval, maximum splits ties).
#include "ir/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <optional>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"

namespace mn {

namespace {

using ops::scalar_like;
using Range = std::pair<double, double>;

constexpr double sqrt_2 = std::numbers::sqrt2;
constexpr double inv_sqrt_2pi = std::numbers::inv_sqrtpi / sqrt_2;  // 1/sqrt(2 pi)
constexpr double two_over_sqrt_pi = 2.0 * std::numbers::inv_sqrtpi;
// The tanh GELU's constants as f32 holds them (as PyTorch's f32 kernels do), so a decomposition
// built from f32 graph scalars evaluates bit for bit like the direct reference.
constexpr double gelu_tanh_scale = static_cast<float>(sqrt_2 * std::numbers::inv_sqrtpi);
constexpr double gelu_tanh_cubic = static_cast<float>(0.044715);

// A constant the tensor's dtype cannot hold exactly, as the sum of two scalars of that dtype
// (head + rounding remainder): the double reference then sees it to ~1e-15, so gradients built
// from it stay exact, while a narrow-precision kernel simply gets the rounded head.
Tensor precise_scalar(Tensor like, double v) {
  const double head = round_to_dtype(v, like.dtype());
  if (head == v || !std::isfinite(head)) return scalar_like(like, v);
  return scalar_like(like, head) + scalar_like(like, v - head);
}

Tensor apply1(const char* op, Tensor x, Attrs attrs = {}) {
  return x.graph().apply(op, std::move(attrs), {x});
}
Tensor apply2(const char* op, Tensor a, Tensor b) {
  if (!a.valid() || !b.valid()) {
    throw Error(std::string(op) + ": input " + (a.valid() ? "1" : "0") + " is an empty Tensor");
  }
  return a.graph().apply(op, {}, {a, b});
}

// ---- inference ----

TensorType infer_same_dtype_broadcast(std::string_view op, std::span<const TensorType> in) {
  return ops::infer_broadcast(op, in, /*require_float=*/false);
}

TensorType infer_float_broadcast(std::string_view op, std::span<const TensorType> in) {
  return ops::infer_broadcast(op, in, /*require_float=*/true);
}

TensorType infer_any_unary(std::string_view, std::span<const TensorType> in) { return in[0]; }

// Comparisons hold 0/1 in the operands' float type (f32 for integer operands) so masks multiply.
TensorType infer_compare(std::string_view op, std::span<const TensorType> in) {
  TensorType t = infer_same_dtype_broadcast(op, in);
  if (!is_float(t.dtype)) t.dtype = DType::f32;
  return t;
}

// ---- samples ----

TensorType typed(Shape s, DType t = DType::f32) { return {std::move(s), t}; }

// Gradcheck tolerance of samples with 16-bit operands: the vjp's scalars are graph constants of
// the operand's dtype, rounded to it (2^-11 for f16, 2^-8 for bf16).
constexpr double f16_grad_tolerance = 2e-3;
constexpr double bf16_grad_tolerance = 1.6e-2;

double grad_tolerance_for(DType t, double tol) {
  if (t == DType::f16) return std::max(tol, f16_grad_tolerance);
  if (t == DType::bf16) return std::max(tol, bf16_grad_tolerance);
  return tol;
}

// Shapes in f32, plus the same op on f16 and bf16 storage (and i32 where the op accepts it).
std::vector<OpSample> unary_samples(Range r, const Attrs& attrs = {}, double tol = 1e-6,
                                    bool with_int = false) {
  std::vector<OpSample> out;
  const std::vector<std::tuple<const char*, Shape, DType>> shapes{
      {"matrix", {3, 4}, DType::f32}, {"batch", {2, 3, 5}, DType::f32},
      {"scalar", {}, DType::f32},     {"single", {1}, DType::f32},
      {"f16", {3, 4}, DType::f16},    {"bf16", {2, 3, 5}, DType::bf16}};
  out.reserve(shapes.size() + 1);
  for (const auto& [label, shape, t] : shapes) {
    out.push_back({.label = label,
                   .inputs = {typed(shape, t)},
                   .attrs = attrs,
                   .ranges = {r},
                   .grad_tolerance = grad_tolerance_for(t, tol)});
  }
  if (with_int) {
    // Past 2^24, so that a float round trip would lose the low bits.
    out.push_back({.label = "i32",
                   .inputs = {typed({3, 4}, DType::i32)},
                   .attrs = attrs,
                   .ranges = {{-3e8, 3e8}}});
  }
  return out;
}

// f32 shapes and broadcasts, the same on f16 and bf16 storage, and, for ops accepting integers,
// i32 operands drawn from `int_range` (past 2^24: exact only in integer arithmetic).
std::vector<OpSample> binary_samples(Range ra, Range rb, std::optional<Range> int_range = {}) {
  std::vector<OpSample> out;
  const std::vector<std::tuple<const char*, Shape, Shape, DType>> shapes{
      {"same", {3, 4}, {3, 4}, DType::f32},           {"row", {3, 4}, {4}, DType::f32},
      {"outer", {3, 1}, {1, 4}, DType::f32},          {"batch", {2, 3, 4}, {3, 1}, DType::f32},
      {"scalar_right", {2, 3}, {}, DType::f32},       {"scalar_left", {}, {2, 3}, DType::f32},
      {"leading_one", {1, 4}, {2, 3, 4}, DType::f32}, {"f16_row", {3, 4}, {4}, DType::f16},
      {"bf16_batch", {2, 3, 4}, {3, 1}, DType::bf16}};
  out.reserve(shapes.size() + 1);
  for (const auto& [label, sa, sb, t] : shapes) {
    out.push_back({.label = label,
                   .inputs = {typed(sa, t), typed(sb, t)},
                   .ranges = {ra, rb},
                   .grad_tolerance = grad_tolerance_for(t, 1e-6)});
  }
  if (int_range) {
    out.push_back({.label = "i32_row",
                   .inputs = {typed({3, 4}, DType::i32), typed({4}, DType::i32)},
                   .ranges = {*int_range, *int_range}});
  }
  return out;
}

// ---- op definitions ----

using UnaryGrad = std::function<Tensor(const Node& n, Tensor x, Tensor y, Tensor g)>;
using UnaryFn = std::function<double(const Node& n, double x)>;

OpDef unary_op(std::string name, std::string summary, UnaryFn f, const UnaryGrad& grad, Range range,
               bool allow_int = false) {
  OpDef d;
  d.name = std::move(name);
  d.arity = 1;
  d.archetype = Archetype::pointwise;
  d.differentiable = static_cast<bool>(grad);
  d.infer = [op = d.name, allow_int](const Attrs&, std::span<const TensorType> in) {
    return allow_int ? infer_any_unary(op, in) : ops::infer_unary_float(op, in);
  };
  d.eval = [f](const Node& n, std::span<const Array* const> in) {
    return ops::eval_unary(n, *in[0], [&](double x) { return f(n, x); });
  };
  if (grad) {
    d.vjp = [grad](const Node& n, std::span<const Tensor> in, Tensor y, Tensor g) {
      return std::vector<Tensor>{grad(n, in[0], y, g)};
    };
  }
  d.samples = [range, allow_int] { return unary_samples(range, {}, 1e-6, allow_int); };
  d.summary = std::move(summary);
  return d;
}

using BinaryGrad = std::function<std::vector<Tensor>(Tensor a, Tensor b, Tensor y, Tensor g)>;

// int_range: the op accepts integer operands, sampled from that range.
OpDef binary_op(std::string name, std::string summary, double (*f)(double, double),
                const BinaryGrad& grad, Range ra, Range rb, std::optional<Range> int_range) {
  const bool allow_int = int_range.has_value();
  OpDef d;
  d.name = std::move(name);
  d.arity = 2;
  d.archetype = Archetype::pointwise;
  d.differentiable = true;
  d.infer = [op = d.name, allow_int](const Attrs&, std::span<const TensorType> in) {
    return allow_int ? infer_same_dtype_broadcast(op, in) : infer_float_broadcast(op, in);
  };
  d.eval = [f](const Node& n, std::span<const Array* const> in) {
    return ops::eval_binary(n, *in[0], *in[1], f);
  };
  d.vjp = [grad](const Node&, std::span<const Tensor> in, Tensor y, Tensor g) {
    auto gs = grad(in[0], in[1], y, g);
    return std::vector<Tensor>{sum_to(gs[0], in[0].shape()), sum_to(gs[1], in[1].shape())};
  };
  d.samples = [ra, rb, int_range] { return binary_samples(ra, rb, int_range); };
  d.summary = std::move(summary);
  return d;
}

OpDef compare_op(std::string name, std::string summary, double (*f)(double, double)) {
  OpDef d;
  d.name = std::move(name);
  d.arity = 2;
  d.archetype = Archetype::pointwise;
  d.differentiable = false;
  d.infer = [op = d.name](const Attrs&, std::span<const TensorType> in) {
    return infer_compare(op, in);
  };
  d.eval = [f](const Node& n, std::span<const Array* const> in) {
    return ops::eval_binary(n, *in[0], *in[1], f);
  };
  d.samples = [] {
    auto s = binary_samples({-1, 1}, {-1, 1});
    // Small integers make ties (the interesting case for eq/le/ge) likely.
    s.push_back({.label = "int_ties",
                 .inputs = {typed({4, 5}, DType::i32), typed({5}, DType::i32)},
                 .ranges = {{0, 3}, {0, 3}}});
    // Neighbouring integers past 2^24, which f32 would merge.
    s.push_back({.label = "i32_past_f32",
                 .inputs = {typed({4, 5}, DType::i32), typed({5}, DType::i32)},
                 .ranges = {{16777216, 16777220}, {16777216, 16777220}}});
    return s;
  };
  d.summary = std::move(summary);
  return d;
}

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::erf(x / sqrt_2)); }
double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(gelu_tanh_scale * (x + gelu_tanh_cubic * x * x * x)));
}
double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// d/dx of 0.5 x (1 + erf(x/sqrt2)) = Phi(x) + x phi(x).
Tensor gelu_exact_derivative(Tensor x) {
  Tensor cdf = 0.5 * (1.0 + erf(x / sqrt(scalar_like(x, 2.0))));
  Tensor pdf = exp(-0.5 * (x * x)) * precise_scalar(x, inv_sqrt_2pi);
  return cdf + x * pdf;
}

// d/dx of 0.5 x (1 + tanh(u)), u = c (x + k x^3).
Tensor gelu_tanh_derivative(Tensor x) {
  Tensor t = tanh(gelu_tanh_scale * (x + gelu_tanh_cubic * (x * x * x)));
  Tensor du = gelu_tanh_scale * (1.0 + (3.0 * gelu_tanh_cubic) * (x * x));
  return 0.5 * (1.0 + t) + (0.5 * x) * ((1.0 - t * t) * du);
}

void register_unary(OpRegistry& r) {
  auto fn = [](double (*f)(double)) { return [f](const Node&, double x) { return f(x); }; };
  r.add(unary_op(
      "neg", "-x", fn([](double x) { return -x; }),
      [](const Node&, Tensor, Tensor, Tensor g) { return neg(g); }, {-2, 2}, true));
  r.add(unary_op(
      "abs", "|x| (gradient sign(x), 0 at 0)", fn([](double x) { return std::abs(x); }),
      [](const Node&, Tensor x, Tensor, Tensor g) {
        return g * (gt(x, scalar_like(x, 0)) - lt(x, scalar_like(x, 0)));
      },
      {-2, 2}, true));
  r.add(unary_op("exp", "e^x", fn([](double x) { return std::exp(x); }),
                 [](const Node&, Tensor, Tensor y, Tensor g) { return g * y; }, {-2, 2}));
  r.add(unary_op("log", "natural logarithm", fn([](double x) { return std::log(x); }),
                 [](const Node&, Tensor x, Tensor, Tensor g) { return g / x; }, {0.2, 3}));
  r.add(unary_op("sqrt", "square root", fn([](double x) { return std::sqrt(x); }),
                 [](const Node&, Tensor, Tensor y, Tensor g) { return (0.5 * g) / y; }, {0.2, 3}));
  r.add(unary_op("rsqrt", "1 / sqrt(x)", fn([](double x) { return 1.0 / std::sqrt(x); }),
                 [](const Node&, Tensor, Tensor y, Tensor g) { return (-0.5 * g) * (y * y * y); },
                 {0.2, 3}));
  r.add(unary_op("sin", "sine", fn([](double x) { return std::sin(x); }),
                 [](const Node&, Tensor x, Tensor, Tensor g) { return g * cos(x); }, {-3, 3}));
  r.add(unary_op("cos", "cosine", fn([](double x) { return std::cos(x); }),
                 [](const Node&, Tensor x, Tensor, Tensor g) { return neg(g * sin(x)); }, {-3, 3}));
  r.add(unary_op("tanh", "hyperbolic tangent", fn([](double x) { return std::tanh(x); }),
                 [](const Node&, Tensor, Tensor y, Tensor g) { return g * (1.0 - y * y); },
                 {-2, 2}));
  r.add(
      unary_op("relu", "max(x, 0) (gradient 0 at 0)", fn([](double x) { return x > 0 ? x : 0.0; }),
               // From the output (y > 0 exactly where x > 0): the backward pass then keeps what
               // the next layer keeps anyway, not the input too (a BatchNorm's output in a CNN).
               [](const Node&, Tensor, Tensor y, Tensor g) { return g * gt(y, scalar_like(y, 0)); },
               {-2, 2}));
  {
    OpDef d = unary_op("erf", "Gauss error function", fn([](double x) { return std::erf(x); }),
                       [](const Node&, Tensor x, Tensor, Tensor g) {
                         return (precise_scalar(x, two_over_sqrt_pi) * g) * exp(neg(x * x));
                       },
                       {-2, 2});
    d.internal = true;
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op("sigmoid", "1 / (1 + e^-x)", fn(sigmoid_of),
                       [](const Node&, Tensor, Tensor y, Tensor g) { return g * (y * (1.0 - y)); },
                       {-3, 3});
    d.decompose = [](const Node&, std::span<const Tensor> in) {
      return 1.0 / (1.0 + exp(neg(in[0])));
    };
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op("silu", "x * sigmoid(x)", fn([](double x) { return x * sigmoid_of(x); }),
                       [](const Node&, Tensor x, Tensor, Tensor g) {
                         Tensor s = sigmoid(x);
                         return g * (s * (1.0 + x * (1.0 - s)));
                       },
                       {-3, 3});
    d.decompose = [](const Node&, std::span<const Tensor> in) { return in[0] * sigmoid(in[0]); };
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op(
        "leaky_relu", "x for x > 0, negative_slope * x otherwise",
        [](const Node& n, double x) {
          return x > 0 ? x : n.attrs.as<LeakyReluAttrs>().negative_slope * x;
        },
        [](const Node& n, Tensor x, Tensor, Tensor g) {
          double slope = n.attrs.as<LeakyReluAttrs>().negative_slope;
          Tensor pos = gt(x, scalar_like(x, 0));
          return g * (pos + precise_scalar(x, slope) * (1.0 - pos));
        },
        {-2, 2});
    d.samples = [] {
      auto s = unary_samples({-2, 2}, LeakyReluAttrs{0.01});
      auto t = unary_samples({-2, 2}, LeakyReluAttrs{0.3});
      for (auto& x : t) x.label += "_slope0.3";
      s.insert(s.end(), t.begin(), t.end());
      return s;
    };
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op(
        "gelu", "x * Phi(x), exact (erf) or tanh approximation",
        [](const Node& n, double x) {
          return n.attrs.as<GeluAttrs>().approximate == GeluApprox::tanh ? gelu_tanh(x)
                                                                         : gelu_exact(x);
        },
        [](const Node& n, Tensor x, Tensor, Tensor g) {
          bool approx = n.attrs.as<GeluAttrs>().approximate == GeluApprox::tanh;
          return g * (approx ? gelu_tanh_derivative(x) : gelu_exact_derivative(x));
        },
        {-3, 3});
    d.decompose = [](const Node& n, std::span<const Tensor> in) {
      Tensor x = in[0];
      if (n.attrs.as<GeluAttrs>().approximate == GeluApprox::tanh) {
        return (0.5 * x) * (1.0 + tanh(gelu_tanh_scale * (x + gelu_tanh_cubic * (x * x * x))));
      }
      // x / sqrt(2) rather than x * f32(1/sqrt(2)): exact in the double reference.
      return (0.5 * x) * (1.0 + erf(x / sqrt(scalar_like(x, 2.0))));
    };
    d.samples = [] {
      auto s = unary_samples({-3, 3}, GeluAttrs{GeluApprox::none});
      auto t = unary_samples({-3, 3}, GeluAttrs{GeluApprox::tanh});
      for (auto& x : t) x.label += "_tanh";
      // The tanh form's f32 constants round in 16-bit graph scalars, so its decomposition
      // matches the direct form only in f32.
      std::erase_if(t, [](const OpSample& x) { return x.inputs[0].dtype != DType::f32; });
      s.insert(s.end(), t.begin(), t.end());
      return s;
    };
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op(
        "softplus", "log(1 + e^(beta x)) / beta, linear above threshold",
        [](const Node& n, double x) {
          const auto& a = n.attrs.as<SoftplusAttrs>();
          return a.beta * x > a.threshold ? x : std::log1p(std::exp(a.beta * x)) / a.beta;
        },
        [](const Node& n, Tensor x, Tensor, Tensor g) {
          const auto& a = n.attrs.as<SoftplusAttrs>();
          Tensor bx = x * a.beta;
          return g * where(gt(bx, scalar_like(x, a.threshold)), scalar_like(x, 1), sigmoid(bx));
        },
        {-3, 3});
    d.decompose = [](const Node& n, std::span<const Tensor> in) {
      const auto& a = n.attrs.as<SoftplusAttrs>();
      Tensor x = in[0];
      Tensor bx = x * a.beta;
      return where(gt(bx, scalar_like(x, a.threshold)), x, log(1.0 + exp(bx)) / a.beta);
    };
    d.samples = [] {
      auto s = unary_samples({-3, 3}, SoftplusAttrs{});
      // beta 2, threshold 1: both branches (kink at x = 0.5 kept away by the range split).
      for (Range r : {Range{-3, 0.4}, Range{0.6, 3}}) {
        s.push_back({.label = r.first < 0 ? "beta2_below" : "beta2_above",
                     .inputs = {typed({3, 4})},
                     .attrs = SoftplusAttrs{2.0, 1.0},
                     .ranges = {r}});
      }
      return s;
    };
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op(
        "clamp", "min(max(x, lo), hi); gradient passes where lo <= x <= hi",
        [](const Node& n, double x) {
          const auto& a = n.attrs.as<ClampAttrs>();
          return std::min(std::max(x, a.lo), a.hi);
        },
        [](const Node& n, Tensor x, Tensor, Tensor g) {
          const auto& a = n.attrs.as<ClampAttrs>();
          return g * (ge(x, scalar_like(x, a.lo)) * le(x, scalar_like(x, a.hi)));
        },
        {-2, 2}, true);
    d.infer = [](const Attrs& attrs, std::span<const TensorType> in) {
      const auto& a = attrs.as<ClampAttrs>();
      if (!(a.lo <= a.hi)) shape_fail("clamp", in, "lo <= hi");
      // An integer tensor stays integer only between integral bounds.
      if (!is_float(in[0].dtype) && (std::trunc(a.lo) != a.lo || std::trunc(a.hi) != a.hi)) {
        shape_fail("clamp", in, "integral lo and hi for an integer operand");
      }
      return in[0];
    };
    d.samples = [] {
      auto s = unary_samples({-2, 2}, ClampAttrs{-0.5, 0.7});
      s.push_back({.label = "i32",
                   .inputs = {typed({3, 4}, DType::i32)},
                   .attrs = ClampAttrs{-1e8, 2e8},
                   .ranges = {{-3e8, 3e8}}});
      return s;
    };
    r.add(std::move(d));
  }
  {
    OpDef d = unary_op("stop_gradient", "identity that blocks the gradient",
                       fn([](double x) { return x; }), nullptr, {-2, 2}, true);
    r.add(std::move(d));
  }
}

// Float widening (f16/bf16 -> f32) is exact; anything else rounds to the target type.
bool cast_is_exact(DType from, DType to) {
  return from == to || (to == DType::f32 && (from == DType::f16 || from == DType::bf16));
}

void register_cast(OpRegistry& r) {
  r.add({.name = "cast",
         .arity = 1,
         .archetype = Archetype::pointwise,
         .differentiable = true,
         .infer =
             [](const Attrs& attrs, std::span<const TensorType> in) {
               return TensorType{in[0].shape, attrs.as<CastAttrs>().dtype};
             },
         .eval =
             [](const Node& n, std::span<const Array* const> in) {
               const DType to = n.type.dtype;
               if (cast_is_exact(in[0]->dtype, to)) {
                 return ops::eval_unary(n, *in[0], [](double x) { return x; });
               }
               return ops::eval_unary(n, *in[0], [to](double x) { return round_to_dtype(x, to); });
             },
         .vjp =
             [](const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
               // Only float-to-float casts carry a gradient; it is cast back to the input type.
               if (!is_float(in[0].dtype()) || !is_float(n.type.dtype)) {
                 return std::vector<Tensor>{Tensor{}};
               }
               return std::vector<Tensor>{cast(g, in[0].dtype())};
             },
         .samples =
             [] {
               std::vector<OpSample> s;
               // The cotangent is cast back to the input type, so the gradient of an f16/bf16
               // input is exact only to that type's precision (2^-11, 2^-8).
               const std::vector<std::tuple<const char*, DType, double>> cases{
                   {"f32_to_f32", DType::f32, 1e-6},
                   {"f16_to_f32", DType::f16, 1e-3},
                   {"bf16_to_f32", DType::bf16, 8e-3}};
               s.reserve(cases.size() + 8);
               for (auto [label, from, tol] : cases) {
                 s.push_back({.label = label,
                              .inputs = {typed({3, 4}, from)},
                              .attrs = CastAttrs{DType::f32},
                              .ranges = {{-2, 2}},
                              .grad_tolerance = tol});
               }
               // Rounding casts are steps: finite differences cannot check them, so their
               // operand takes no gradient. Ranges reach f16's overflow to infinity and its
               // subnormals, integers past 2^24, and negatives into u32 (stored as 0).
               auto rounding = [&](const char* label, DType from, DType to, Range r) {
                 s.push_back({.label = label,
                              .inputs = {typed({4, 5}, from)},
                              .attrs = CastAttrs{to},
                              .ranges = {r},
                              .no_grad = {true}});
               };
               rounding("f32_to_f16", DType::f32, DType::f16, {-7e4, 7e4});
               rounding("f32_to_f16_subnormal", DType::f32, DType::f16, {-1e-4, 1e-4});
               rounding("f32_to_bf16", DType::f32, DType::bf16, {-3, 3});
               rounding("bf16_to_f16", DType::bf16, DType::f16, {-100, 100});
               rounding("f16_to_bf16", DType::f16, DType::bf16, {-100, 100});
               rounding("i32_to_f32", DType::i32, DType::f32, {-3e8, 3e8});
               rounding("f32_to_i32", DType::f32, DType::i32, {-1e5, 1e5});
               rounding("i32_to_u32", DType::i32, DType::u32, {-3e8, 3e8});
               return s;
             },
         .summary = "converts the element type (rounding to narrower types)"});
}

double pow_of(double a, double b) { return std::pow(a, b); }

void register_binary(OpRegistry& r) {
  r.add(binary_op(
      "add", "a + b", [](double a, double b) { return a + b; },
      [](Tensor, Tensor, Tensor, Tensor g) {
        return std::vector<Tensor>{g, g};
      },
      {-2, 2}, {-2, 2}, Range{-4e8, 4e8}));
  r.add(binary_op(
      "sub", "a - b", [](double a, double b) { return a - b; },
      [](Tensor, Tensor, Tensor, Tensor g) {
        return std::vector<Tensor>{g, neg(g)};
      },
      {-2, 2}, {-2, 2}, Range{-4e8, 4e8}));
  r.add(binary_op(
      "mul", "a * b", [](double a, double b) { return a * b; },
      [](Tensor a, Tensor b, Tensor, Tensor g) {
        return std::vector<Tensor>{g * b, g * a};
      },
      {-2, 2}, {-2, 2}, Range{-4e4, 4e4}));
  r.add(binary_op(
      "div", "a / b", [](double a, double b) { return a / b; },
      [](Tensor, Tensor b, Tensor y, Tensor g) {
        Tensor ga = g / b;
        return std::vector<Tensor>{ga, neg(ga * y)};
      },
      {-2, 2}, {0.5, 2}, std::nullopt));
  r.add(binary_op(
      "pow", "a ^ b", pow_of,
      [](Tensor a, Tensor b, Tensor y, Tensor g) {
        Tensor ga = g * (b * pow(a, b - 1.0));
        // d/db a^b = a^b log a; 0 where a == 0 (the limit for b > 0, as PyTorch masks it).
        Tensor zero = scalar_like(a, 0);
        Tensor gb = where(eq(a, zero), zero, g * (y * log(a)));
        return std::vector<Tensor>{ga, gb};
      },
      {0.5, 2}, {-1.5, 1.5}, std::nullopt));
  r.add(binary_op(
      "maximum", "elementwise max (ties split the gradient)",
      [](double a, double b) { return std::isnan(a) || a > b ? a : b; },
      [](Tensor a, Tensor b, Tensor, Tensor g) {
        Tensor wa = gt(a, b) + 0.5 * eq(a, b);
        return std::vector<Tensor>{g * wa, g * (1.0 - wa)};
      },
      {-2, 2}, {-2, 2}, Range{-2e9, 2e9}));
  r.add(binary_op(
      "minimum", "elementwise min (ties split the gradient)",
      [](double a, double b) { return std::isnan(a) || a < b ? a : b; },
      [](Tensor a, Tensor b, Tensor, Tensor g) {
        Tensor wa = lt(a, b) + 0.5 * eq(a, b);
        return std::vector<Tensor>{g * wa, g * (1.0 - wa)};
      },
      {-2, 2}, {-2, 2}, Range{-2e9, 2e9}));

  r.add(compare_op("eq", "a == b as 0/1", [](double a, double b) { return a == b ? 1.0 : 0.0; }));
  r.add(compare_op("ne", "a != b as 0/1", [](double a, double b) { return a != b ? 1.0 : 0.0; }));
  r.add(compare_op("lt", "a < b as 0/1", [](double a, double b) { return a < b ? 1.0 : 0.0; }));
  r.add(compare_op("le", "a <= b as 0/1", [](double a, double b) { return a <= b ? 1.0 : 0.0; }));
  r.add(compare_op("gt", "a > b as 0/1", [](double a, double b) { return a > b ? 1.0 : 0.0; }));
  r.add(compare_op("ge", "a >= b as 0/1", [](double a, double b) { return a >= b ? 1.0 : 0.0; }));
}

void register_where(OpRegistry& r) {
  r.add({.name = "where",
         .arity = 3,
         .archetype = Archetype::pointwise,
         .differentiable = true,
         .infer =
             [](const Attrs&, std::span<const TensorType> in) {
               if (in[1].dtype != in[2].dtype) {
                 shape_fail("where", in, "a and b must have the same dtype");
               }
               Shape s;
               try {
                 s = broadcast_shapes(in[0].shape, in[1].shape, "where");
                 s = broadcast_shapes(s, in[2].shape, "where");
               } catch (const ShapeError&) {
                 shape_fail("where", in, "cond, a and b must broadcast");
               }
               return TensorType{s, in[1].dtype};
             },
         .eval =
             [](const Node& n, std::span<const Array* const> in) {
               return ops::eval_ternary(
                   n, *in[0], *in[1], *in[2],
                   [](double c, double a, double b) { return c != 0.0 ? a : b; });
             },
         .vjp =
             [](const Node&, std::span<const Tensor> in, Tensor, Tensor g) {
               Tensor zero = scalar_like(g, 0);
               Tensor cond = in[0];
               return std::vector<Tensor>{Tensor{}, sum_to(where(cond, g, zero), in[1].shape()),
                                          sum_to(where(cond, zero, g), in[2].shape())};
             },
         .samples =
             [] {
               std::vector<OpSample> s;
               const std::vector<std::tuple<const char*, Shape, Shape, Shape>> shapes{
                   {"same", {3, 4}, {3, 4}, {3, 4}},
                   {"broadcast", {3, 1}, {4}, {2, 1, 1}},
                   {"scalar_branch", {2, 3}, {2, 3}, {}}};
               s.reserve(shapes.size() + 4);
               for (const auto& [label, sc, sa, sb] : shapes) {
                 s.push_back({.label = label,
                              .inputs = {typed(sc, DType::i32), typed(sa), typed(sb)},
                              .ranges = {{0, 2}, {-2, 2}, {-2, 2}},
                              .no_grad = {true, false, false}});
               }
               s.push_back({.label = "float_cond",
                            .inputs = {typed({2, 3}), typed({2, 3}), typed({2, 3})},
                            .ranges = {{-1, 1}, {-2, 2}, {-2, 2}},
                            .no_grad = {true, false, false}});
               s.push_back({.label = "f16_branches",
                            .inputs = {typed({3, 1}, DType::i32), typed({4}, DType::f16),
                                       typed({3, 4}, DType::f16)},
                            .ranges = {{0, 2}, {-2, 2}, {-2, 2}},
                            .no_grad = {true, false, false},
                            .grad_tolerance = f16_grad_tolerance});
               s.push_back({.label = "bf16_float_cond",
                            .inputs = {typed({2, 3}, DType::bf16), typed({2, 3}, DType::bf16),
                                       typed({}, DType::bf16)},
                            .ranges = {{-1, 1}, {-2, 2}, {-2, 2}},
                            .no_grad = {true, false, false},
                            .grad_tolerance = bf16_grad_tolerance});
               s.push_back({.label = "i32_branches",
                            .inputs = {typed({3, 1}, DType::i32), typed({4}, DType::i32),
                                       typed({3, 4}, DType::i32)},
                            .ranges = {{0, 2}, {-2e9, 2e9}, {-2e9, 2e9}}});
               return s;
             },
         .summary = "cond != 0 ? a : b, broadcast"});
}

}  // namespace

// ---- public functions ----

Tensor add(Tensor a, Tensor b) { return apply2("add", a, b); }
Tensor sub(Tensor a, Tensor b) { return apply2("sub", a, b); }
Tensor mul(Tensor a, Tensor b) { return apply2("mul", a, b); }
Tensor div(Tensor a, Tensor b) { return apply2("div", a, b); }
Tensor pow(Tensor a, Tensor b) { return apply2("pow", a, b); }
Tensor maximum(Tensor a, Tensor b) { return apply2("maximum", a, b); }
Tensor minimum(Tensor a, Tensor b) { return apply2("minimum", a, b); }
Tensor eq(Tensor a, Tensor b) { return apply2("eq", a, b); }
Tensor ne(Tensor a, Tensor b) { return apply2("ne", a, b); }
Tensor lt(Tensor a, Tensor b) { return apply2("lt", a, b); }
Tensor le(Tensor a, Tensor b) { return apply2("le", a, b); }
Tensor gt(Tensor a, Tensor b) { return apply2("gt", a, b); }
Tensor ge(Tensor a, Tensor b) { return apply2("ge", a, b); }

Tensor neg(Tensor x) { return apply1("neg", x); }
Tensor abs(Tensor x) { return apply1("abs", x); }
Tensor exp(Tensor x) { return apply1("exp", x); }
Tensor log(Tensor x) { return apply1("log", x); }
Tensor sqrt(Tensor x) { return apply1("sqrt", x); }
Tensor rsqrt(Tensor x) { return apply1("rsqrt", x); }
Tensor sin(Tensor x) { return apply1("sin", x); }
Tensor cos(Tensor x) { return apply1("cos", x); }
Tensor tanh(Tensor x) { return apply1("tanh", x); }
Tensor erf(Tensor x) { return apply1("erf", x); }
Tensor sigmoid(Tensor x) { return apply1("sigmoid", x); }
Tensor relu(Tensor x) { return apply1("relu", x); }
Tensor silu(Tensor x) { return apply1("silu", x); }
Tensor stop_gradient(Tensor x) { return apply1("stop_gradient", x); }
Tensor leaky_relu(Tensor x, double negative_slope) {
  return apply1("leaky_relu", x, LeakyReluAttrs{negative_slope});
}
Tensor gelu(Tensor x, GeluApprox approximate) { return apply1("gelu", x, GeluAttrs{approximate}); }
Tensor softplus(Tensor x, double beta, double threshold) {
  if (!(beta > 0)) {
    throw ShapeError("softplus: beta must be positive, got " + std::to_string(beta));
  }
  return apply1("softplus", x, SoftplusAttrs{beta, threshold});
}
Tensor clamp(Tensor x, double lo, double hi) { return apply1("clamp", x, ClampAttrs{lo, hi}); }
Tensor cast(Tensor x, DType dtype) {
  if (x.valid() && x.dtype() == dtype) return x;
  return apply1("cast", x, CastAttrs{dtype});
}
Tensor where(Tensor cond, Tensor a, Tensor b) {
  if (!cond.valid()) throw Error("where: input 0 is an empty Tensor");
  return cond.graph().apply("where", {}, {cond, a, b});
}

Tensor operator+(Tensor a, Tensor b) { return add(a, b); }
Tensor operator-(Tensor a, Tensor b) { return sub(a, b); }
Tensor operator*(Tensor a, Tensor b) { return mul(a, b); }
Tensor operator/(Tensor a, Tensor b) { return div(a, b); }
Tensor operator-(Tensor x) { return neg(x); }
Tensor operator+(Tensor a, double b) { return add(a, scalar_like(a, b)); }
Tensor operator+(double a, Tensor b) { return add(scalar_like(b, a), b); }
Tensor operator-(Tensor a, double b) { return sub(a, scalar_like(a, b)); }
Tensor operator-(double a, Tensor b) { return sub(scalar_like(b, a), b); }
Tensor operator*(Tensor a, double b) { return mul(a, scalar_like(a, b)); }
Tensor operator*(double a, Tensor b) { return mul(scalar_like(b, a), b); }
Tensor operator/(Tensor a, double b) { return div(a, scalar_like(a, b)); }
Tensor operator/(double a, Tensor b) { return div(scalar_like(b, a), b); }

void register_elementwise_ops(OpRegistry& r) {
  register_binary(r);
  register_unary(r);
  register_cast(r);
  register_where(r);
}

}  // namespace mn
