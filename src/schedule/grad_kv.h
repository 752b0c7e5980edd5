#pragma once
// Attention's key and value gradients from one pass over the scores: attention_grad_k and
// attention_grad_v of the same operands each recompute the probabilities P = exp(S - lse) of
// every score they read, and dV = Pᵀ·dout needs nothing dK's kernel does not already have. Where
// the tensor-core kernel takes the pair (codegen::attention_training::takes_grad_kv), the
// attention_grad_k kernel stores dV too, and the attention_grad_v kernel is gone. Only with
// DeviceTraits::fused_attention_outputs (sessions set it unless MN_FUSED_ATTENTION_OUTPUTS=0).
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// The attention_grad_k group gains the attention_grad_v node and its value as output 1
// (computes_grad_v); the attention_grad_v group is dropped.
void compute_grad_v_with_grad_k(const Graph& g, std::vector<KernelGroup>& groups,
                                const codegen::DeviceTraits& device);

}  // namespace mn::schedule
