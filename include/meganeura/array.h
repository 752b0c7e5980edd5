#pragma once
// A dense host tensor. The CPU reference computes in double whatever the dtype says, so it is
// an oracle for every precision; dtype records what the value stands for (and rounding happens
// only where a graph casts or stores to a narrower type).
#include <meganeura/dtype.h>

#include <cstdint>
#include <vector>

namespace mn {

struct Array {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<double> data;

  Array() = default;
  Array(Shape s, DType t) : shape(std::move(s)), dtype(t), data(mn::numel(shape), 0.0) {}
  Array(Shape s, DType t, std::vector<double> values);  // checks the element count

  static Array scalar(double v, DType t = DType::f32) { return Array({}, t, {v}); }
  static Array full(Shape s, double v, DType t = DType::f32);

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  TensorType type() const { return {shape, dtype}; }

  std::vector<float> to_f32() const;
  static Array from_f32(Shape s, const std::vector<float>& values, DType t = DType::f32);
};

// Rounds `v` to what `t` can hold (f32/f16/bf16 rounding to nearest even; integers truncate
// and wrap modulo 2^32 as 32-bit GPU arithmetic does, u32 taking negatives as 0, NaN and
// infinities as 0).
double round_to_dtype(double v, DType t);

}  // namespace mn
