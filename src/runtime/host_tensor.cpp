#include "runtime/host_tensor.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include <meganeura/data.h>
#include <meganeura/error.h>

namespace mn::runtime {

namespace {

template <class T>
void put(std::span<std::byte> out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

template <class Src>
void encode_any(std::span<const Src> values, DType dtype, std::span<std::byte> out) {
  if (out.size() < values.size() * dtype_size(dtype)) throw Error("encode: output too small");
  // Same representation: a plain copy (batches of f32 images, i32 labels).
  if ((std::is_same_v<Src, float> && dtype == DType::f32) ||
      (std::is_same_v<Src, int32_t> && dtype == DType::i32)) {
    std::memcpy(out.data(), values.data(), values.size() * sizeof(Src));
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = static_cast<double>(values[i]);
    switch (dtype) {
      case DType::f32:
        put(out, i, static_cast<float>(v));
        break;
      case DType::f16:
        put(out, i, f16_bits(v));
        break;
      case DType::bf16:
        put(out, i, bf16_bits(v));
        break;
      case DType::i32:
        put(out, i, static_cast<int32_t>(std::trunc(v)));
        break;
      case DType::u32:
        put(out, i, static_cast<uint32_t>(std::max(0.0, std::trunc(v))));
        break;
    }
  }
}

template <class T>
T get(std::span<const std::byte> in, size_t i) {
  T v;
  std::memcpy(&v, in.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

void encode(std::span<const double> values, DType dtype, std::span<std::byte> out) {
  encode_any(values, dtype, out);
}
void encode(std::span<const float> values, DType dtype, std::span<std::byte> out) {
  encode_any(values, dtype, out);
}
void encode(std::span<const int32_t> values, DType dtype, std::span<std::byte> out) {
  encode_any(values, dtype, out);
}

std::vector<double> decode(std::span<const std::byte> bytes, DType dtype, size_t n) {
  if (bytes.size() < n * dtype_size(dtype)) throw Error("decode: input too small");
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::f32:
        out[i] = get<float>(bytes, i);
        break;
      case DType::f16:
        out[i] = f16_value(get<uint16_t>(bytes, i));
        break;
      case DType::bf16:
        out[i] = bf16_value(get<uint16_t>(bytes, i));
        break;
      case DType::i32:
        out[i] = get<int32_t>(bytes, i);
        break;
      case DType::u32:
        out[i] = get<uint32_t>(bytes, i);
        break;
    }
  }
  return out;
}

}  // namespace mn::runtime
