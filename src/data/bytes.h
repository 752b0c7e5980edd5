#pragma once
// Byte-order helpers: files hold little-endian (safetensors) or big-endian (IDX) elements,
// whatever the host is.
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace mn::data {

template <typename U>
constexpr U byte_swap(U v) {
  static_assert(std::is_unsigned_v<U>);
  U out = 0;
  for (size_t i = 0; i < sizeof(U); ++i) {
    out = static_cast<U>((out << 8) | (v & 0xff));
    v = static_cast<U>(v >> 8);
  }
  return out;
}

template <typename U>
U load_le(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  if constexpr (std::endian::native == std::endian::big) v = byte_swap(v);
  return v;
}

template <typename U>
U load_be(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  if constexpr (std::endian::native == std::endian::little) v = byte_swap(v);
  return v;
}

template <typename U>
void store_le(uint8_t* p, U v) {
  if constexpr (std::endian::native == std::endian::big) v = byte_swap(v);
  std::memcpy(p, &v, sizeof(U));
}

template <typename U>
void store_be(uint8_t* p, U v) {
  if constexpr (std::endian::native == std::endian::little) v = byte_swap(v);
  std::memcpy(p, &v, sizeof(U));
}

// Swaps every `width`-byte element of a buffer in place (big-endian file <-> little-endian).
inline void swap_elements(uint8_t* p, size_t n_bytes, size_t width) {
  if (width <= 1) return;
  for (size_t i = 0; i + width <= n_bytes; i += width) {
    for (size_t a = 0, b = width - 1; a < b; ++a, --b) std::swap(p[i + a], p[i + b]);
  }
}

// a * b, or false when it overflows.
inline bool mul_overflow(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace mn::data
