#pragma once
// sample_tokens: the counter-based random numbers it draws, shared by the reference and the GPU
// lowering (whose GLSL spells the same arithmetic).
#include <cstdint>

namespace mn::ops::sampling {

// A 32-bit integer mixer (xor-shift-multiply rounds): every input bit affects every output bit.
constexpr uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// The random bits of token `token` of row `row` at generation step `step` under `seed`.
constexpr uint32_t token_bits(uint32_t seed, uint32_t step, uint32_t row, uint32_t token) {
  return mix(mix(mix(mix(seed) + step) + row) + token);
}

// A uniform number in (0, 1) from the bits' top 23: ((bits >> 9) + 0.5) / 2^23, exact in f32.
constexpr double uniform(uint32_t bits) {
  return (static_cast<double>(bits >> 9) + 0.5) / 8388608.0;
}

}  // namespace mn::ops::sampling
