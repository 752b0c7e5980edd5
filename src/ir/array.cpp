#include <meganeura/array.h>
#include <meganeura/error.h>

#include <bit>
#include <cmath>
#include <cstring>

namespace mn {

Array::Array(Shape s, DType t, std::vector<double> values)
    : shape(std::move(s)), dtype(t), data(std::move(values)) {
  if (static_cast<int64_t>(data.size()) != mn::numel(shape)) {
    throw Error("Array: " + std::to_string(data.size()) + " values for shape " + shape_str(shape) +
                " (" + std::to_string(mn::numel(shape)) + " elements)");
  }
}

Array Array::full(Shape s, double v, DType t) {
  Array a(std::move(s), t);
  std::fill(a.data.begin(), a.data.end(), v);
  return a;
}

std::vector<float> Array::to_f32() const {
  std::vector<float> out(data.size());
  for (size_t i = 0; i < data.size(); ++i) out[i] = static_cast<float>(data[i]);
  return out;
}

Array Array::from_f32(Shape s, const std::vector<float>& values, DType t) {
  std::vector<double> d(values.begin(), values.end());
  return Array(std::move(s), t, std::move(d));
}

namespace {

// Rounds to a binary format with `mantissa` explicit bits and minimum normal exponent
// `min_exp`, nearest-even, in one step from double (no double rounding through f32); values at
// or past the halfway point above the largest finite become infinity, as hardware converts.
double round_binary(double v, int mantissa, int min_exp, double overflow_at) {
  if (!std::isfinite(v) || v == 0.0) return v;
  double a = std::fabs(v);
  if (a >= overflow_at) return std::copysign(INFINITY, v);
  int e;
  std::frexp(a, &e);                   // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, min_exp);  // subnormals share the minimum exponent
  double quantum = std::ldexp(1.0, exp - mantissa);
  double q = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest-even
  return std::copysign(q, v);
}

double round_f16(double v) { return round_binary(v, 10, -14, 65520.0); }
double round_bf16(double v) {
  // Largest finite bf16 is (2 - 2^-7)·2^127; halfway to the next step is (2 - 2^-8)·2^127.
  return round_binary(v, 7, -126, std::ldexp(2.0 - std::ldexp(1.0, -8), 127));
}

// An integer value modulo 2^32, in [0, 2^32): what 32-bit integer arithmetic on the GPU keeps
// of it. (Converting an out-of-range double to a 32-bit integer is undefined in C++.)
double wrap32(double t) {
  const double m = std::fmod(t, 4294967296.0);
  return m < 0 ? m + 4294967296.0 : m;
}

}  // namespace

double round_to_dtype(double v, DType t) {
  switch (t) {
    case DType::f32:
      return static_cast<float>(v);
    case DType::f16:
      return round_f16(v);
    case DType::bf16:
      return round_bf16(v);
    case DType::i32: {
      if (!std::isfinite(v)) return 0;
      const double m = wrap32(std::trunc(v));
      return m >= 2147483648.0 ? m - 4294967296.0 : m;
    }
    case DType::u32:
      return std::isfinite(v) ? wrap32(std::max(0.0, std::trunc(v))) : 0;
  }
  return v;
}

}  // namespace mn
