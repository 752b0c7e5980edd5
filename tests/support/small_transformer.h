#pragma once
// The small transformers the tests build: 4 query heads over 2 key/value heads, an FFN 1.5×
// the hidden width, batch 2; the sizes a test needs (small enough for gradient checks and the
// CPU reference) given.
#include <cstdint>

#include <meganeura/models.h>

namespace mn::testing {

inline TransformerSpec small_transformer(int64_t layers, int64_t hidden, int64_t vocab,
                                         int64_t sequence, uint64_t seed) {
  TransformerSpec s;
  s.layers = layers;
  s.hidden = hidden;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = hidden * 3 / 2;
  s.vocab = vocab;
  s.sequence = sequence;
  s.batch = 2;
  s.seed = seed;
  return s;
}

}  // namespace mn::testing
