#pragma once
// Statistics computed twice over one value are computed once.
//
// The GPU lowering decomposes each composite on its own: a training batch norm's forward pass
// takes the unbiased variance of the convolution's output for the running statistics, and its
// backward pass the biased one, with kept dimensions, for 1/σ. The backward pass then reads the
// whole convolution output again, keeping it from the forward pass for a value of one number
// per channel (ResNet-50 at batch 32: the outputs of the layers whose normalized values are
// kept anyway). Here a reduction identical to an earlier one (op, attributes, input) reads the
// earlier result, and a variance over the same axes of the same input with another correction
// or keepdims is the earlier one rescaled, (n − c₀)/(n − c₁), and reshaped. Only reductions
// whose result is much smaller than their input are shared: keeping a small result across the
// step instead of the large input is always the cheaper side.
#include <optional>

#include <meganeura/graph.h>

namespace mn::schedule {

// `lowered` (after lower_for_gpu) with repeated statistics read from their first computation;
// nullopt when there is none.
std::optional<Graph> share_statistics(const Graph& lowered);

}  // namespace mn::schedule
