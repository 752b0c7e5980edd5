#include "runtime/convert_raw.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <meganeura/data.h>
#include <meganeura/error.h>

#include "runtime/host_tensor.h"

namespace mn::runtime {

namespace {

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// f32 -> bf16 rounding to nearest even on the bits (exact, as bf16_bits, but without doubles).
uint16_t bf16_from_f32(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet, sign kept
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float as_f32(const std::byte* p, DType from) {
  switch (from) {
    case DType::f32:
      return load<float>(p);
    case DType::bf16:
      return std::bit_cast<float>(static_cast<uint32_t>(load<uint16_t>(p)) << 16);
    case DType::f16:
      return static_cast<float>(f16_value(load<uint16_t>(p)));  // exact in f32
    default:
      return 0.0f;
  }
}

void float_to_float(std::span<const std::byte> in, DType from, std::span<std::byte> out, DType to,
                    size_t n) {
  const size_t wi = dtype_size(from), wo = dtype_size(to);
  for (size_t i = 0; i < n; ++i) {
    const float v = as_f32(in.data() + i * wi, from);
    std::byte* o = out.data() + i * wo;
    if (to == DType::f32) {
      std::memcpy(o, &v, 4);
    } else {
      // f16 from f32 rounds once: every f32 is exact as a double.
      const uint16_t bits = to == DType::bf16 ? bf16_from_f32(v) : f16_bits(v);
      std::memcpy(o, &bits, 2);
    }
  }
}

}  // namespace

void convert_elements(std::span<const std::byte> in, DType from, std::span<std::byte> out,
                      DType to) {
  const size_t n = in.size() / dtype_size(from);
  if (in.size() % dtype_size(from) != 0 || out.size() != n * dtype_size(to)) {
    throw Error("convert_elements: " + std::to_string(in.size()) + " bytes of " + dtype_name(from) +
                " do not fill " + std::to_string(out.size()) + " bytes of " + dtype_name(to));
  }
  if (from == to) {
    std::memcpy(out.data(), in.data(), in.size());
  } else if (is_float(from) && is_float(to)) {
    float_to_float(in, from, out, to, n);
  } else {
    encode(std::span<const double>(decode(in, from, n)), to, out);  // integers: rare and small
  }
}

}  // namespace mn::runtime
