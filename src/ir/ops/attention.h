#pragma once
// Attributes of the attention family: scaled_dot_product_attention and rotary embeddings.
#include <array>
#include <cstdint>
#include <tuple>

#include <meganeura/graph.h>

namespace mn {

// scaled_dot_product_attention: q [..., Hq, Lq, D], k [..., Hkv, Lk, D], v [..., Hkv, Lk, Dv],
// then an additive mask when has_mask. Rank-2 operands [L, D] are one head. Leading (batch) axes
// broadcast as in numpy; query head h reads key/value head h / (Hq / Hkv).
// causal: query i sees keys j <= i (top-left aligned, as PyTorch's is_causal, also when
// Lq != Lk). scale <= 0 stands for 1/sqrt(D) (the public function stores 0 for it); an explicit
// scale is used as the operands' dtype holds it, like any graph scalar.
struct AttentionAttrs {
  bool causal = false;
  double scale = 0.0;
  bool has_mask = false;
  bool operator==(const AttentionAttrs&) const = default;
  auto fields() const { return std::tie(causal, scale, has_mask); }
  static constexpr std::array<const char*, 3> names{"causal", "scale", "has_mask"};
};

// rope (and its internal transpose rope_backward): x [..., L, D], D even; position p of row l is
// position_offset + l, pair i < D/2 turns by p * theta^(-2i/D) (Hugging Face half-split layout:
// element i pairs with element i + D/2).
struct RopeAttrs {
  double theta = 10000.0;
  int64_t position_offset = 0;
  bool operator==(const RopeAttrs&) const = default;
  auto fields() const { return std::tie(theta, position_offset); }
  static constexpr std::array<const char*, 2> names{"theta", "position_offset"};
};

}  // namespace mn
