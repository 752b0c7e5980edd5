#pragma once
// Flash attention's forward saves the log-sum-exp: a training step's attention_lse(q, k[, mask])
// is computed by the scaled_dot_product_attention kernel of the same operands and attributes,
// which has each row's maximum and sum when it finishes the row, instead of by a second pass
// over the keys. Taken where the attention's kernel can store it
// (codegen::attention_lowering::saves_lse), both are kernels of their own with one output, and
// every reader of the log-sum-exp runs after the attention. The tensor-core forwards do so only
// with DeviceTraits::fused_attention_outputs (sessions set it unless
// MN_FUSED_ATTENTION_OUTPUTS=0).
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// The attention's group gains the attention_lse node and its value as output 1 (saves_lse);
// the attention_lse group is dropped.
void save_lse_in_forward(const Graph& g, std::vector<KernelGroup>& groups,
                         const codegen::DeviceTraits& device);

}  // namespace mn::schedule
