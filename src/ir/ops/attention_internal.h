#pragma once
// Pieces of scaled_dot_product_attention (attention.cpp) that its sibling ops reuse: the
// operands' geometry, the grouped-query layout of the graph-op forms, and the training ops'
// gradients (attention_training.cpp).
#include <span>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

#include "ir/ops/attention.h"

namespace mn::ops {

// Validates q, k, v as scaled_dot_product_attention does, naming `op` in errors; returns the
// output shape.
Shape attention_output_shape(std::string_view op, std::span<const TensorType> qkv, double scale);

// The gradients of q, k, v (and of the mask, the fourth entry) of attention with an additive
// mask: qkv_mask = {q, k, v, mask}.
std::vector<Tensor> attention_vjp_masked(double scale, std::span<const Tensor> qkv_mask, Tensor out,
                                         Tensor dout);

// Operand shapes padded to a common rank R >= 3 (a head axis of 1 for rank-2 operands), and the
// sizes every form of the op needs.
struct AttentionGeometry {
  int rank = 3;
  bool heads = true;  // false: q, k, v were all [L, D]; the output is [Lq, Dv]
  Shape q, k, v, mask;
  Shape batch;  // broadcast leading axes, R - 3 of them
  int64_t hq = 1, hkv = 1, lq = 1, lk = 1, d = 1, dv = 1;
  Shape out;
  Shape scores;  // batch + [Hq, Lq, Lk], rank R
  int64_t group() const { return hq / hkv; }
  // One value per query row: the output's shape without its last axis.
  Shape rows() const { return Shape(out.begin(), out.end() - 1); }
};

// Checks q, k, v (and the mask when a.has_mask) in that order, naming `op` in errors.
AttentionGeometry attention_geometry(std::span<const TensorType> qkv_mask, const AttentionAttrs& a,
                                     std::string_view op);
Shape attention_pad_to(const Shape& s, int rank);

// s times the scale, or divided by sqrt(D) for the default (exact in every float dtype).
double attention_scaled(double s, double scale, int64_t d);
Tensor attention_scaled(Tensor s, double scale, int64_t d);

// The operands in the grouped layout of the graph-op forms: q becomes [..., Hkv, G, Lq, D] and
// k, v become [..., Hkv, 1, Lk, *], so one broadcasting matmul serves every group.
struct AttentionGrouped {
  Tensor q, k, v, mask;
  Shape out;  // batch + [Hkv, G, Lq, Dv]
};
AttentionGrouped attention_grouped(const AttentionGeometry& g, std::span<const Tensor> qkv_mask,
                                   bool has_mask);
// The scores q kᵀ · scale + mask, causal positions -inf, in the grouped layout.
Tensor attention_scores(const AttentionGeometry& g, const AttentionGrouped& t,
                        const AttentionAttrs& a);

// Whether the training ops (attention_lse, attention_grad_q/k/v) take these operands: q, k, v
// with the same leading axes (a broadcast operand's gradient would sum over its copies).
bool attention_training_applies(const AttentionGeometry& g);
// The gradients of q, k, v (and the mask's, in graph ops) of scaled_dot_product_attention from
// the training ops: the row log-sum-exp, D = rowsum(dO * O), then dQ, dK, dV recomputing the
// probabilities tile by tile.
std::vector<Tensor> attention_training_vjp(const AttentionAttrs& a, std::span<const Tensor> in,
                                           Tensor out, Tensor dout);
// The mask's gradient in graph ops, sum_to(dS) (an Lq x Lk tensor: only a trained mask needs it).
Tensor attention_mask_grad(const AttentionAttrs& a, std::span<const Tensor> in, Tensor out,
                           Tensor dout);

}  // namespace mn::ops
