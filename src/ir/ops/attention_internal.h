#pragma once
// Pieces of scaled_dot_product_attention (attention.cpp) that its sibling ops reuse.
#include <span>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

namespace mn::ops {

// Validates q, k, v as scaled_dot_product_attention does, naming `op` in errors; returns the
// output shape.
Shape attention_output_shape(std::string_view op, std::span<const TensorType> qkv, double scale);

// The gradients of q, k, v (and of the mask, the fourth entry) of attention with an additive
// mask: qkv_mask = {q, k, v, mask}.
std::vector<Tensor> attention_vjp_masked(double scale, std::span<const Tensor> qkv_mask, Tensor out,
                                         Tensor dout);

}  // namespace mn::ops
