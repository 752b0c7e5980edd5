#include "ir/ops/common.h"

#include <algorithm>

namespace mn::ops {

std::vector<int64_t> broadcast_strides(std::span<const int64_t> in, std::span<const int64_t> out) {
  std::vector<int64_t> s(out.size(), 0);
  auto cs = contiguous_strides(in);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : cs[i];
  return s;
}

TensorType infer_broadcast(std::string_view op, std::span<const TensorType> in,
                           bool require_float) {
  Shape shape = in[0].shape;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype) shape_fail(op, in, "operands must have the same dtype");
    if (require_float && !is_float(in[i].dtype)) shape_fail(op, in, "operands must be float");
  }
  try {
    for (size_t i = 1; i < in.size(); ++i)
      shape = broadcast_shapes(shape, in[i].shape, std::string(op));
  } catch (const ShapeError&) {
    shape_fail(op, in, "shapes must broadcast");
  }
  return {shape, in[0].dtype};
}

TensorType infer_unary_float(std::string_view op, std::span<const TensorType> in) {
  if (!is_float(in[0].dtype)) shape_fail(op, in, "operand must be float");
  return in[0];
}

Tensor scalar_like(Tensor like, double v) { return like.graph().scalar(v, like.dtype()); }

std::vector<int64_t> normalize_axes(std::span<const int64_t> axes, int rank, std::string_view op) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank, std::string(op)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace mn::ops
