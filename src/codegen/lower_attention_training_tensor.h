#pragma once
// Attention's gradient ops (attention_grad_q, _k, _v, and dK with dV beside it) on
// workgroup-scope tensor-addressed matrices (VK_NV_cooperative_matrix2;
// kernels/attention_training_tensor.comp): the softmax of each block runs on the products'
// accumulators by per-element operations, where the subgroup-matrix kernels
// (lower_attention_training_coop.h) take every score through shared memory.
#include <optional>

#include "codegen/attention_tensor_tiles.h"
#include "codegen/attention_training_shape.h"
#include "codegen/kernel.h"

namespace mn::codegen::attention_training {

// The kernel where it serves: DeviceTraits::tensor_attention (set by sessions unless
// MN_TENSOR_ATTENTION=0) on a device with tensor-addressed matrices, per-element operations and
// conversions of bf16 workgroup matrices, a gradient form (attention_lse keeps its kernel), heads
// 16 to 128 wide in steps of 16, and operands the subgroup-matrix kernels would take (16-bit, or
// bf16 products, or MN_COOP_ATTENTION=1); nullopt otherwise.
std::optional<Lowering> tensor_training_kernel(const LowerContext& ctx, const TrainingShape& g);

// How the form's tiles share their blocks among workgroups (split_tile_blocks, for
// DeviceTraits::tensor_attention_grad_fills fills of the device).
BlockSplit split_blocks(const DeviceTraits& device, const TrainingShape& g,
                        const AttentionTensorTile& tile);

// Whether that kernel serves this node of form `f`.
bool takes_tensor_training(const LowerContext& ctx, Form f);

}  // namespace mn::codegen::attention_training
