#include <meganeura/array.h>
#include <meganeura/error.h>

#include <bit>
#include <cmath>
#include <cstring>

namespace mn {

Array::Array(Shape s, DType t, std::vector<double> values)
    : shape(std::move(s)), dtype(t), data(std::move(values)) {
  if (static_cast<int64_t>(data.size()) != mn::numel(shape)) {
    throw Error("Array: " + std::to_string(data.size()) + " values for shape " +
                shape_str(shape) + " (" + std::to_string(mn::numel(shape)) + " elements)");
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

// Rounds a float to `mantissa_bits` explicit mantissa bits, nearest-even, keeping f32's range
// for bf16 and saturating f16's range to infinity as the hardware does.
double round_f16(double v) {
  if (!std::isfinite(v)) return v;
  double a = std::fabs(v);
  if (a >= 65520.0) return std::copysign(INFINITY, v);
  if (a < std::ldexp(1.0, -24) / 2) return std::copysign(0.0, v);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, -14);  // subnormals share the minimum exponent
  double quantum = std::ldexp(1.0, exp - 10);
  double q = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest-even
  return std::copysign(q, v);
}

double round_bf16(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f)) return f;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  bits &= 0xffff0000u;
  return std::bit_cast<float>(bits);
}

}  // namespace

double round_to_dtype(double v, DType t) {
  switch (t) {
    case DType::f32: return static_cast<float>(v);
    case DType::f16: return round_f16(v);
    case DType::bf16: return round_bf16(v);
    case DType::i32: return static_cast<double>(static_cast<int32_t>(std::trunc(v)));
    case DType::u32: return static_cast<double>(static_cast<uint32_t>(std::max(0.0, std::trunc(v))));
  }
  return v;
}

}  // namespace mn
