// Elementwise ONNX ops: arithmetic, comparisons and logic, activations, Cast, Clip, Where.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>

#include "ir/ops/elementwise.h"
#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

using Fn1 = Tensor (*)(NodeContext&, Tensor);

// A unary op on float inputs (and integers where `integers`); the output keeps the input's type.
void add_unary(ConverterTable& t, const std::string& op, Fn1 f, bool integers = false) {
  t.add(op, [f, integers](NodeContext& c) {
    if (!is_float_type(c.type(0)) && !(integers && is_integer(c.type(0)))) {
      c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)) +
                    (integers ? " (float and integer types only)" : " (float types only)"));
    }
    c.out(0, f(c, c.in(0)), c.type(0));
  });
}

// floor/ceil/round through a cast to i32, exact where |x| < 2^23 and x itself beyond (every
// float that large is an integer already).
Tensor integral(NodeContext& c, Tensor x, Tensor (*adjust)(NodeContext&, Tensor x, Tensor t)) {
  Tensor t = cast(cast(x, DType::i32), x.dtype());  // toward zero
  Tensor r = adjust(c, x, t);
  return where(lt(abs(x), c.scalar(8388608.0, x)), r, x);
}

Tensor floor_of(NodeContext& c, Tensor x) {
  return integral(c, x, [](NodeContext&, Tensor x, Tensor t) { return t - lt(x, t); });
}
Tensor ceil_of(NodeContext& c, Tensor x) {
  return integral(c, x, [](NodeContext&, Tensor x, Tensor t) { return t + gt(x, t); });
}
// Round half to even, as ONNX (numpy.round).
Tensor round_of(NodeContext& c, Tensor x) {
  return integral(c, x, [](NodeContext& c, Tensor x, Tensor) {
    Tensor f = floor_of(c, x);
    Tensor d = x - f;
    Tensor half = c.scalar(0.5, x);
    Tensor f_even = eq(f - 2.0 * floor_of(c, f * 0.5), c.scalar(0.0, x));
    Tensor up = gt(d, half) + eq(d, half) * (1.0 - f_even);
    return f + up;
  });
}

// atan through two half-angle steps, atan(x) = 2 atan(x / (1 + sqrt(1 + x^2))), which bring
// any x within tan(pi/8) ~ 0.414 of 0, and the odd series to x^15 (error below 1e-7 there).
Tensor atan_of(NodeContext&, Tensor x) {
  Tensor t = x;
  for (int i = 0; i < 2; ++i) t = t / (1.0 + sqrt(1.0 + t * t));
  Tensor t2 = t * t;
  Tensor series = 1.0 / 15.0 * t2;
  for (int k = 13; k >= 3; k -= 2) series = (1.0 / k - series) * t2;
  // series = t^2/3 - t^4/5 + ... (alternating), so atan(t) = t (1 - series)
  return 4.0 * (t * (1.0 - series));
}
Tensor asin_of(NodeContext& c, Tensor x) { return 2.0 * atan_of(c, x / (1.0 + sqrt(1.0 - x * x))); }
Tensor acos_of(NodeContext& c, Tensor x) { return 1.5707963267948966 - asin_of(c, x); }

Tensor sign_of(NodeContext& c, Tensor x) {
  Tensor zero = c.scalar(0.0, x);
  return gt(x, zero) - lt(x, zero);
}

// Binary operands: ONNX requires both of one type; a known scalar of another (CastLike-free
// exports) is rejected by the checker, so only the types are compared here.
std::pair<Tensor, Tensor> operands(NodeContext& c) {
  // Before opset 7, broadcast = 1 aligned the trailing axes (numpy's rule) unless an `axis`
  // attribute placed the second operand elsewhere.
  if (c.opset() < 7 && c.has_attr("axis")) c.unsupported("the 'axis' attribute of legacy broadcasting");
  if (c.type(0) != c.type(1)) {
    c.fail(std::string("operands of different types: ") + elem_type_name(c.type(0)) + " and " +
           elem_type_name(c.type(1)));
  }
  return {c.in(0), c.in(1)};
}

// add/sub/mul/max/min: integers computed in i32, floats in their dtype.
void add_arith(ConverterTable& t, const std::string& op, Tensor (*f)(Tensor, Tensor)) {
  t.add(op, [f](NodeContext& c) {
    auto [a, b] = operands(c);
    if (c.type(0) == ElemType::boolean) c.unsupported("BOOL operands");
    c.out(0, f(a, b), c.type(0));
  });
}

// Max, Min, Sum, Mean: one or more operands broadcast together.
void add_variadic(ConverterTable& t, const std::string& op, Tensor (*f)(Tensor, Tensor),
                  bool mean) {
  t.add(op, [f, mean](NodeContext& c) {
    if (c.input_count() == 0) c.fail("needs at least one input");
    Tensor acc = c.in(0);
    for (size_t i = 1; i < c.input_count(); ++i) {
      if (c.type(i) != c.type(0)) c.fail("operands of different types");
      acc = f(acc, c.in(i));
    }
    if (mean) {
      if (!is_float_type(c.type(0))) c.unsupported("Mean of integers");
      acc = acc / static_cast<double>(c.input_count());
    }
    c.out(0, acc, c.type(0));
  });
}

void add_compare(ConverterTable& t, const std::string& op, Tensor (*f)(Tensor, Tensor)) {
  t.add(op, [f](NodeContext& c) {
    auto [a, b] = operands(c);
    c.out(0, f(a, b), ElemType::boolean);
  });
}

// And/Or/Xor on BOOL values held as 0/1.
void add_logic(ConverterTable& t, const std::string& op, Tensor (*f)(Tensor, Tensor)) {
  t.add(op, [f](NodeContext& c) {
    if (c.type(0) != ElemType::boolean || c.type(1) != ElemType::boolean) {
      c.fail("operands must be BOOL");
    }
    c.out(0, f(c.in(0), c.in(1)), ElemType::boolean);
  });
}

Tensor integer_div(Tensor a, Tensor b) {
  // Truncating division of 32-bit integers through f32: exact while |a| < 2^24.
  return cast(cast(a, DType::f32) / cast(b, DType::f32), DType::i32);
}

void convert_div(NodeContext& c) {
  auto [a, b] = operands(c);
  if (is_integer(c.type(0))) c.out(0, integer_div(a, b), c.type(0));
  else if (is_float_type(c.type(0))) c.out(0, a / b, c.type(0));
  else c.unsupported(std::string("operands of ") + elem_type_name(c.type(0)));
}

// Integer powers are computed in f32 (exact while the result stays below 2^24).
void convert_pow(NodeContext& c) {
  if (!is_float_type(c.type(0)) && !is_integer(c.type(0))) {
    c.unsupported(std::string("bases of ") + elem_type_name(c.type(0)));
  }
  Tensor x = c.in_float(0);
  Tensor y = c.in(1);
  if (y.dtype() != x.dtype()) y = cast(y, x.dtype());
  Tensor r = pow(x, y);
  if (is_integer(c.type(0))) r = cast(floor_of(c, r + 0.5), DType::i32);
  c.out(0, r, c.type(0));
}

// fmod = 1: C's fmod (the sign of a); fmod = 0: Python's % (the sign of b), integers only.
void convert_mod(NodeContext& c) {
  auto [a, b] = operands(c);
  const bool fmod = c.attr_int("fmod", 0) != 0;
  const bool integer = is_integer(c.type(0));
  if (!fmod && !integer) c.fail("fmod = 0 is for integer types only");
  Tensor af = cast(a, DType::f32);
  Tensor bf = cast(b, DType::f32);
  Tensor q = af / bf;
  Tensor whole = fmod ? cast(cast(q, DType::i32), DType::f32) : floor_of(c, q);
  Tensor r = af - whole * bf;
  c.out(0, integer ? cast(r, DType::i32) : cast(r, a.dtype()), c.type(0));
}

void convert_not(NodeContext& c) {
  if (c.type(0) != ElemType::boolean) c.fail("operand must be BOOL");
  Tensor x = c.in(0);
  c.out(0, 1.0 - x, ElemType::boolean);
}

// IsNaN: x != x, true for NaN alone (an unordered comparison on the GPU as in the reference).
void convert_isnan(NodeContext& c) {
  if (!is_float_type(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  Tensor x = c.in(0);
  c.out(0, ne(x, x), ElemType::boolean);
}

// IsInf: x equal to +inf and/or -inf, as detect_positive and detect_negative choose.
void convert_isinf(NodeContext& c) {
  if (!is_float_type(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  Tensor x = c.in(0);
  const bool positive = c.attr_int("detect_positive", 1) != 0;
  const bool negative = c.attr_int("detect_negative", 1) != 0;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor result = ne(x, x) * 0.0;  // false, of x's shape
  if (positive) result = maximum(result, eq(x, c.scalar(inf, x)));
  if (negative) result = maximum(result, eq(x, c.scalar(-inf, x)));
  c.out(0, result, ElemType::boolean);
}

void convert_where(NodeContext& c) {
  if (c.type(1) != c.type(2)) c.fail("X and Y of different types");
  c.out(0, where(c.in(0), c.in(1), c.in(2)), c.type(1));
}

// Clip: bounds as attributes (before opset 11) or optional inputs, known or computed.
void convert_clip(NodeContext& c) {
  Tensor x = c.in(0);
  if (c.opset() < 11) {
    const double lo = c.attr_float("min", -std::numeric_limits<double>::infinity());
    const double hi = c.attr_float("max", std::numeric_limits<double>::infinity());
    c.out(0, clamp(x, lo, hi), c.type(0));
    return;
  }
  for (size_t i = 1; i < 3; ++i) {
    if (!c.has(i)) continue;
    if (c.is_known(i) && is_float(x.dtype())) {
      const double v = c.known_scalar(i, i == 1 ? "min" : "max");
      const double inf = std::numeric_limits<double>::infinity();
      x = i == 1 ? clamp(x, v, inf) : clamp(x, -inf, v);
    } else {
      Tensor b = c.in(i);
      x = i == 1 ? maximum(x, b) : minimum(x, b);
    }
  }
  c.out(0, x, c.type(0));
}

// A known value converted on the host (DOUBLE lives only while importing).
Array cast_host(Array a, ElemType to) {
  for (double& v : a.data) {
    if (to == ElemType::boolean) v = v != 0.0 ? 1.0 : 0.0;
    else if (is_integer(to)) v = std::trunc(v);
    else if (to != ElemType::f64) v = round_to_dtype(v, graph_dtype_of(to, "Cast"));
  }
  return a;
}

// A value converted to `to`: BOOL is x != 0; floats to integers truncate; the rest casts.
void cast_to(NodeContext& c, ElemType to) {
  const ElemType from = c.type(0);
  if (to == ElemType::f64 || from == ElemType::f64) {
    if (!c.is_known(0) || c.value(0).source == Value::Source::input) {
      c.unsupported("DOUBLE values computed at run time (the GPU computes in 32 bits at most)");
    }
    c.out_known(0, cast_host(c.known(0, "input"), to), to);
    return;
  }
  Tensor x = c.in(0);
  if (to == ElemType::boolean) {
    c.out(0, ne(x, c.scalar(0.0, x)), to);
    return;
  }
  // Narrowing integer casts wrap in ONNX; i32 would hold the unwrapped value.
  if (is_integer(to) && elem_type_size(to) < 4 && is_integer(from) &&
      elem_type_size(from) > elem_type_size(to)) {
    c.unsupported(std::string("Cast to the narrower integer type ") + elem_type_name(to));
  }
  c.out(0, cast(x, graph_dtype_of(to, c.where())), to);
}

void convert_cast(NodeContext& c) {
  const auto to = c.attr_int("to");
  if (!to) c.fail("attribute 'to' is missing");
  cast_to(c, elem_type_of(static_cast<int>(*to), c.where() + " 'to'"));
}

void convert_cast_like(NodeContext& c) { cast_to(c, c.type(1)); }

void convert_identity(NodeContext& c) { c.out(0, c.in(0), c.type(0)); }

void convert_prelu(NodeContext& c) {
  Tensor x = c.in(0);
  Tensor slope = c.in(1);
  c.out(0, where(lt(x, c.scalar(0.0, x)), x * slope, x), c.type(0));
}

}  // namespace

void add_elementwise_converters(ConverterTable& t) {
  add_unary(t, "Abs", [](NodeContext&, Tensor x) { return abs(x); }, true);
  add_unary(t, "Neg", [](NodeContext&, Tensor x) { return neg(x); }, true);
  add_unary(t, "Exp", [](NodeContext&, Tensor x) { return exp(x); });
  add_unary(t, "Log", [](NodeContext&, Tensor x) { return log(x); });
  add_unary(t, "Sqrt", [](NodeContext&, Tensor x) { return sqrt(x); });
  add_unary(t, "Reciprocal", [](NodeContext&, Tensor x) { return 1.0 / x; });
  add_unary(t, "Sin", [](NodeContext&, Tensor x) { return sin(x); });
  add_unary(t, "Cos", [](NodeContext&, Tensor x) { return cos(x); });
  add_unary(t, "Tan", [](NodeContext&, Tensor x) { return sin(x) / cos(x); });
  add_unary(t, "Tanh", [](NodeContext&, Tensor x) { return tanh(x); });
  add_unary(t, "Sinh", [](NodeContext&, Tensor x) { return (exp(x) - exp(-x)) * 0.5; });
  add_unary(t, "Cosh", [](NodeContext&, Tensor x) { return (exp(x) + exp(-x)) * 0.5; });
  add_unary(t, "Asinh", [](NodeContext&, Tensor x) { return log(x + sqrt(x * x + 1.0)); });
  add_unary(t, "Acosh", [](NodeContext&, Tensor x) { return log(x + sqrt(x * x - 1.0)); });
  add_unary(t, "Atanh", [](NodeContext&, Tensor x) { return 0.5 * log((1.0 + x) / (1.0 - x)); });
  add_unary(t, "Sigmoid", [](NodeContext&, Tensor x) { return sigmoid(x); });
  add_unary(t, "Relu", [](NodeContext& c, Tensor x) {
    return is_float(x.dtype()) ? relu(x) : maximum(x, c.scalar(0.0, x));
  }, true);
  add_unary(t, "Erf", [](NodeContext&, Tensor x) { return erf(x); });
  add_unary(t, "Softsign", [](NodeContext&, Tensor x) { return x / (1.0 + abs(x)); });
  add_unary(t, "Gelu", [](NodeContext& c, Tensor x) {
    const std::string a = c.attr_string("approximate", "none");
    if (a != "none" && a != "tanh") c.fail("unknown approximate '" + a + "'");
    return gelu(x, a == "tanh" ? GeluApprox::tanh : GeluApprox::none);
  });
  add_unary(t, "Atan", atan_of);
  add_unary(t, "Asin", asin_of);
  add_unary(t, "Acos", acos_of);
  add_unary(t, "Shrink", [](NodeContext& c, Tensor x) {
    const double lambd = c.attr_float("lambd", 0.5), bias = c.attr_float("bias", 0.0);
    Tensor zero = c.scalar(0.0, x);
    return where(lt(x, c.scalar(-lambd, x)), x + bias, where(gt(x, c.scalar(lambd, x)), x - bias, zero));
  });
  add_unary(t, "Floor", floor_of);
  add_unary(t, "Ceil", ceil_of);
  add_unary(t, "Round", round_of);
  add_unary(t, "Softplus", [](NodeContext&, Tensor x) {
    // log(1 + e^x) stably: max(x, 0) + log(1 + e^-|x|).
    return relu(x) + log(1.0 + exp(-abs(x)));
  });
  add_unary(t, "LeakyRelu", [](NodeContext& c, Tensor x) {
    return leaky_relu(x, c.attr_float("alpha", 0.01));
  });
  add_unary(t, "Elu", [](NodeContext& c, Tensor x) {
    const double alpha = c.attr_float("alpha", 1.0);
    return where(gt(x, c.scalar(0.0, x)), x, alpha * (exp(x) - 1.0));
  });
  add_unary(t, "Selu", [](NodeContext& c, Tensor x) {
    const double alpha = c.attr_float("alpha", 1.67326319217681884765625);
    const double gamma = c.attr_float("gamma", 1.05070102214813232421875);
    return gamma * where(gt(x, c.scalar(0.0, x)), x, alpha * (exp(x) - 1.0));
  });
  add_unary(t, "Celu", [](NodeContext& c, Tensor x) {
    const double alpha = c.attr_float("alpha", 1.0);
    Tensor zero = c.scalar(0.0, x);
    return maximum(x, zero) + minimum(zero, alpha * (exp(x / alpha) - 1.0));
  });
  add_unary(t, "HardSigmoid", [](NodeContext& c, Tensor x) {
    return clamp(c.attr_float("alpha", 0.2) * x + c.attr_float("beta", 0.5), 0.0, 1.0);
  });
  add_unary(t, "HardSwish", [](NodeContext&, Tensor x) {
    return x * clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0);
  });
  add_unary(t, "ThresholdedRelu", [](NodeContext& c, Tensor x) {
    const double alpha = c.attr_float("alpha", 1.0);
    return where(gt(x, c.scalar(alpha, x)), x, c.scalar(0.0, x));
  });
  t.add("Sign", [](NodeContext& c) {
    Tensor x = c.in(0);
    c.out(0, sign_of(c, x), c.type(0));
  });

  add_arith(t, "Add", [](Tensor a, Tensor b) { return add(a, b); });
  add_arith(t, "Sub", [](Tensor a, Tensor b) { return sub(a, b); });
  add_arith(t, "Mul", [](Tensor a, Tensor b) { return mul(a, b); });
  t.add("Div", convert_div);
  t.add("Pow", convert_pow);
  t.add("Mod", convert_mod);
  add_variadic(t, "Max", [](Tensor a, Tensor b) { return maximum(a, b); }, false);
  add_variadic(t, "Min", [](Tensor a, Tensor b) { return minimum(a, b); }, false);
  add_variadic(t, "Sum", [](Tensor a, Tensor b) { return add(a, b); }, false);
  add_variadic(t, "Mean", [](Tensor a, Tensor b) { return add(a, b); }, true);
  add_compare(t, "Equal", [](Tensor a, Tensor b) { return eq(a, b); });
  add_compare(t, "Less", [](Tensor a, Tensor b) { return lt(a, b); });
  add_compare(t, "LessOrEqual", [](Tensor a, Tensor b) { return le(a, b); });
  add_compare(t, "Greater", [](Tensor a, Tensor b) { return gt(a, b); });
  add_compare(t, "GreaterOrEqual", [](Tensor a, Tensor b) { return ge(a, b); });
  add_logic(t, "And", [](Tensor a, Tensor b) { return a * b; });
  add_logic(t, "Or", [](Tensor a, Tensor b) { return maximum(a, b); });
  add_logic(t, "Xor", [](Tensor a, Tensor b) { return ne(a, b); });
  t.add("Not", convert_not);
  t.add("IsNaN", convert_isnan);
  t.add("IsInf", convert_isinf);
  t.add("Where", convert_where);
  t.add("Clip", convert_clip);
  t.add("Cast", convert_cast);
  t.add("CastLike", convert_cast_like);
  t.add("Identity", convert_identity);
  t.add("PRelu", convert_prelu);
}

}  // namespace mn::onnx
