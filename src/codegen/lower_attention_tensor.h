#pragma once
// scaled_dot_product_attention and a prompt's cached_attention on workgroup-scope
// tensor-addressed matrices (VK_NV_cooperative_matrix2; kernels/attention_tensor.comp):
// FlashAttention-2's forward with the softmax on the products' accumulators (per-element operations
// and row reductions), where the subgroup-matrix kernel (lower_attention_coop.cpp) takes every
// score through shared memory.
#include "codegen/attention_shape.h"
#include "codegen/kernel.h"

namespace mn::codegen::attention_lowering {

// Whether the kernel serves this attention: DeviceTraits::tensor_attention (set by sessions unless
// MN_TENSOR_ATTENTION=0, not MN_COOP_ATTENTION=0) on a device with tensor-addressed matrices,
// per-element operations, conversions and reductions; scaled_dot_product_attention, or with
// DeviceTraits::tensor_prompt_attention (unless MN_TENSOR_PROMPT_ATTENTION=0) cached_attention at
// positions over 32 query rows or more (fewer with MN_COOP_ATTENTION=1), with
// no rotation or cache slot applied as the operands load; heads 16 to 128 wide in steps of 16
// that the tile's workgroup matrices take (attention_tensor_tiles.h).
bool takes_tensor_forward(const LowerContext& ctx, const AttentionShape& g);

// The kernel; stores the log-sum-exp too where ctx.saved_lse asks.
Lowering tensor_attention_kernel(const LowerContext& ctx, const AttentionShape& g);

}  // namespace mn::codegen::attention_lowering
