#pragma once
// Attention's training ops (attention_lse, attention_grad_q, _k, _v) on tensor cores: the
// register-tiled kernels' forms with their products on bf16 subgroup matrices
// (kernels/attention_training_coop.comp).
#include <optional>

#include "codegen/attention_training_shape.h"
#include "codegen/kernel.h"

namespace mn::codegen::attention_training {

// The tensor-core kernel where it serves: the device has bf16 subgroup matrices
// (DeviceTraits::coop_bf16), the heads are 16 to 128 wide in steps of 16, and either the
// operands are 16-bit (rounding them to bf16 loses little the step has not lost already), the
// step's products are bf16 (DeviceTraits::bf16_products) or MN_COOP_ATTENTION=1 asks for it;
// nullopt otherwise, and with MN_COOP_ATTENTION=0.
std::optional<KernelLaunch> coop_training_kernel(const LowerContext& ctx, const TrainingShape& g);

// Whether the operands may go to bf16 matrices: they are 16-bit (rounding them to bf16 loses
// little the step has not lost already), the step's products are bf16
// (DeviceTraits::bf16_products) or MN_COOP_ATTENTION=1 asks for it; never with
// MN_COOP_ATTENTION=0.
bool bf16_operands_chosen(const LowerContext& ctx);

// Whether that kernel serves this node of form `f`.
bool takes_coop_training(const LowerContext& ctx, Form f);

// Whether a tensor-core kernel (this one, or lower_attention_training_tensor.h's) serves this
// attention_grad_k node (its context with grad_v_output set) with attention_grad_v's result
// stored beside dK (schedule/grad_kv.h).
bool takes_grad_kv(const LowerContext& ctx);

}  // namespace mn::codegen::attention_training
