#pragma once
// Helpers shared by the nn and attention families (not part of the op table).
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

#include "ir/op_def.h"

namespace mn::ops {

// Throws mn::Error naming the op and the operand when `t` is an empty Tensor.
inline void require_tensor(const Tensor& t, std::string_view op, std::string_view operand) {
  if (!t.valid()) {
    throw Error(std::string(op) + ": " + std::string(operand) + " is an empty Tensor");
  }
}

// Every operand float and of the first operand's dtype; else a ShapeError naming the op.
inline void require_same_float(std::string_view op, std::span<const TensorType> in) {
  for (const auto& t : in) {
    if (!is_float(t.dtype)) shape_fail(op, in, "float operands");
    if (t.dtype != in[0].dtype) shape_fail(op, in, "operands of the same dtype");
  }
}

// The row decomposition of a shape around one axis: outer * n * inner elements, with the axis
// elements of one row `inner` apart.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisSplit split_at_axis(std::span<const int64_t> shape, int axis) {
  AxisSplit s;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < axis)
      s.outer *= shape[i];
    else if (i == axis)
      s.n = shape[i];
    else
      s.inner *= shape[i];
  }
  return s;
}

// Axes [begin, end).
inline std::vector<int64_t> axis_range(int64_t begin, int64_t end) {
  std::vector<int64_t> axes;
  for (int64_t a = begin; a < end; ++a) axes.push_back(a);
  return axes;
}

// The gradient of x through xhat = (x - [mean]) * rstd, with statistics over `axes`, given the
// cotangent gx of xhat: rstd * (gx - [mean(gx)] - xhat * mean(gx * xhat)). `centered` is false for
// rms_norm, which does not subtract the mean.
Tensor normalized_input_grad(Tensor gx, Tensor xhat, Tensor rstd, const std::vector<int64_t>& axes,
                             bool centered);

// softmax and log_softmax written with primitive ops (their decompositions; attention reuses it).
Tensor softmax_primitive(Tensor x, int64_t axis);
Tensor log_softmax_primitive(Tensor x, int64_t axis);

}  // namespace mn::ops
