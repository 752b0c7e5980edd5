#pragma once
// Helpers shared by the op families: inference for common shapes of ops, and the loops of the
// reference evaluation (broadcast iteration without per-element index arithmetic).
#include <span>
#include <string_view>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

#include "ir/op_def.h"

namespace mn::ops {

// Strides of `in` as seen from the broadcast output shape `out` (0 along broadcast axes).
std::vector<int64_t> broadcast_strides(std::span<const int64_t> in, std::span<const int64_t> out);

// Calls f(out_index, in_offsets...) for every element of `out` in row-major order, where each
// in_offset is the element offset in the corresponding input given its broadcast strides.
template <size_t N, class F>
void for_each_broadcast(std::span<const int64_t> out,
                        const std::array<std::vector<int64_t>, N>& strides, F&& f) {
  const int rank = static_cast<int>(out.size());
  const int64_t total = numel(out);
  std::vector<int64_t> idx(rank, 0);
  std::array<int64_t, N> off{};
  for (int64_t i = 0; i < total; ++i) {
    f(i, off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
}

// Same float dtype on all inputs, broadcast shapes; output dtype = `out_dtype` or the inputs'.
TensorType infer_broadcast(std::string_view op, std::span<const TensorType> in,
                           bool require_float = true);
TensorType infer_unary_float(std::string_view op, std::span<const TensorType> in);

// Elementwise evaluation with broadcasting, rounding the result to the node's dtype.
template <class F>
Array eval_unary(const Node& n, const Array& x, F&& f) {
  Array out(n.type.shape, n.type.dtype);
  for (size_t i = 0; i < x.data.size(); ++i) out.data[i] = f(x.data[i]);
  return out;
}
template <class F>
Array eval_binary(const Node& n, const Array& a, const Array& b, F&& f) {
  Array out(n.type.shape, n.type.dtype);
  std::array<std::vector<int64_t>, 2> s{broadcast_strides(a.shape, out.shape),
                                        broadcast_strides(b.shape, out.shape)};
  for_each_broadcast<2>(out.shape, s, [&](int64_t i, const std::array<int64_t, 2>& o) {
    out.data[i] = f(a.data[o[0]], b.data[o[1]]);
  });
  return out;
}
template <class F>
Array eval_ternary(const Node& n, const Array& a, const Array& b, const Array& c, F&& f) {
  Array out(n.type.shape, n.type.dtype);
  std::array<std::vector<int64_t>, 3> s{broadcast_strides(a.shape, out.shape),
                                        broadcast_strides(b.shape, out.shape),
                                        broadcast_strides(c.shape, out.shape)};
  for_each_broadcast<3>(out.shape, s, [&](int64_t i, const std::array<int64_t, 3>& o) {
    out.data[i] = f(a.data[o[0]], b.data[o[1]], c.data[o[2]]);
  });
  return out;
}

// A scalar constant of `like`'s dtype in `like`'s graph.
Tensor scalar_like(Tensor like, double v);

// Normalized, sorted, de-duplicated axes; empty input means all axes.
std::vector<int64_t> normalize_axes(std::span<const int64_t> axes, int rank, std::string_view op);

}  // namespace mn::ops
