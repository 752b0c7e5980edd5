#pragma once
// Counter-based random numbers: value i of stream `seed` is a pure function of (seed, i), so the
// CPU reference and GPU kernels (which port the same mixing) produce identical masks and inits.
#include <cstdint>

namespace mn {

// 64-bit mix of (seed, index): splitmix64 of a combined counter.
inline uint64_t random_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + index + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
  return z ^ (z >> 33);
}

// Uniform in [0, 1) with 24 bits, exactly representable in f32 (GPU kernels match bit for bit).
inline double random_uniform(uint64_t seed, uint64_t index) {
  return static_cast<double>(random_bits(seed, index) >> 40) * (1.0 / 16777216.0);
}

}  // namespace mn
