#pragma once
// Helpers shared by the loss family's files: loss.cpp (the elementwise losses) and
// loss_class.cpp (cross_entropy, nll_loss).
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

#include "ir/op_def.h"

namespace mn::ops {

// The forward's output: the per-element shape for Reduction::none, a scalar otherwise.
TensorType loss_output_type(const Shape& per_element, DType dtype, Reduction r);

// Rejects a Reduction value outside none/mean/sum (a cast from a bad integer).
void check_reduction(std::string_view op, std::span<const TensorType> in, Reduction r);

// Reduces per-element losses in double; the mean divides by `count` (0/0 gives NaN).
Array reduce_losses(std::vector<double> per, const Shape& per_shape, DType dtype, Reduction r,
                    double count);

// The reduction written with graph ops (decompositions and second-order gradients).
Tensor reduce_tensor(Tensor per, Reduction r);

// Ones shaped like `t` (the cotangent at which a backward op yields its per-element factor).
Tensor ones_like(Tensor t);

// The cotangent a backward op applies to element i: itself for Reduction::none, else the scalar.
inline double cotangent_at(const Array& ct, int64_t i) {
  return ct.data.size() == 1 ? ct.data[0] : ct.data[static_cast<size_t>(i)];
}

OpSample loss_sample(std::string label, std::vector<TensorType> inputs, Attrs attrs,
                     std::vector<std::pair<double, double>> ranges, std::vector<bool> no_grad = {});

// loss_class.cpp: cross_entropy, nll_loss and their backward ops.
void register_class_loss_ops(OpRegistry& r);

}  // namespace mn::ops
