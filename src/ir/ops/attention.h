#pragma once
// Attributes of the attention family: scaled_dot_product_attention and rotary embeddings.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <vector>

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

namespace mn {

// rope_positions (and its internal transpose rope_positions_backward): x [..., L, D], D even,
// positions i32 broadcastable to x's shape without D ([..., L]); row r turns pair i by
// positions[r] * inv_freq_i (half-split layout as rope). inv_freq_i = theta^(-2i/D), rescaled
// when llama3 as transformers' rope_type "llama3": wavelengths 2 pi / inv_freq longer than
// original_max_position / low_freq_factor are divided by factor, shorter than
// original_max_position / high_freq_factor kept, and those between interpolated.
struct RopePositionsAttrs {
  double theta = 10000.0;
  bool llama3 = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  bool operator==(const RopePositionsAttrs&) const = default;
  auto fields() const {
    return std::tie(theta, llama3, factor, low_freq_factor, high_freq_factor,
                    original_max_position);
  }
  static constexpr std::array<const char*, 6> names{
      "theta", "llama3", "factor", "low_freq_factor", "high_freq_factor", "original_max_position"};
};

// cached_attention: q [..., Hq, Lq, D], k [..., Hkv, T, D], v [..., Hkv, T, Dv] (a KV cache of
// T slots), positions i32 broadcastable to [..., Hq, Lq]: query i sees keys j <= positions[i]
// (none when negative). Grouped-query heads and the scale as scaled_dot_product_attention.
struct CachedAttentionAttrs {
  double scale = 0.0;
  bool operator==(const CachedAttentionAttrs&) const = default;
  auto fields() const { return std::tie(scale); }
  static constexpr std::array<const char*, 1> names{"scale"};
};

namespace ops {
// How many leading operands of an attention op are its matrices: q and k, then v or a gradient
// op's dout (scaled_dot_product_attention, attention_grad_v: 3), or v and dout (attention_grad_q
// and _k: 4), q and k alone for attention_lse (2); 0 for any other op. Masks, log-sum-exps and
// deltas follow them.
size_t attention_matrix_operands(std::string_view op);

// The inverse frequencies inv_freq_i, i < dim / 2, of rope_positions (shared by the reference
// and the GPU lowering, so both turn by the same angles).
std::vector<double> rope_inv_freq(const RopePositionsAttrs& a, int64_t dim);
}  // namespace ops

}  // namespace mn
