#pragma once
// Attributes of the convolution family (src/ir/ops/conv.cpp), read by later stages (GPU
// lowering, optimizer rules), and the internal ops the backward passes are written with.
//
// Layout is NCHW with any number of leading batch axes: x is [..., C, H, W]. conv2d's weight is
// [O, C/groups, kh, kw]; conv_transpose2d's is [C, O/groups, kh, kw] (PyTorch's layouts).
//
// The backward ops:
//   conv2d_backward_input(gy, w)  = d conv2d(x, w) / dx applied to gy: the adjoint of conv2d in
//       x. It is also exactly conv_transpose2d (same weight layout), which is written with it.
//   conv2d_backward_weight(x, gy) = d conv2d(x, w) / dw applied to gy: a reduction over the batch
//       and output positions, shaped like a GEMM with K = batch·OH·OW.
// Both accept a gy smaller than the forward output size of their attributes (the extra output
// positions count as zero); that is what conv_transpose2d with output_padding >= stride needs.
#include <array>
#include <cstdint>
#include <tuple>

#include <meganeura/graph.h>

namespace mn {

struct Conv2dAttrs {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  bool operator==(const Conv2dAttrs&) const = default;
  auto fields() const {
    return std::tie(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups);
  }
  static constexpr std::array<const char*, 7> names{"stride_h",   "stride_w",   "pad_h", "pad_w",
                                                    "dilation_h", "dilation_w", "groups"};
};

struct ConvTranspose2dAttrs {
  Conv2dAttrs conv;  // of the convolution this op is the adjoint of
  int64_t output_padding_h = 0, output_padding_w = 0;

  bool operator==(const ConvTranspose2dAttrs&) const = default;
  auto fields() const { return std::tie(conv, output_padding_h, output_padding_w); }
  static constexpr std::array<const char*, 3> names{"conv", "output_padding_h", "output_padding_w"};
};

// conv2d_backward_input(gy, w): output [..., C, in_h, in_w] where C = w.shape[1]·groups.
struct Conv2dBackwardInputAttrs {
  Conv2dAttrs conv;
  int64_t in_h = 1, in_w = 1;

  bool operator==(const Conv2dBackwardInputAttrs&) const = default;
  auto fields() const { return std::tie(conv, in_h, in_w); }
  static constexpr std::array<const char*, 3> names{"conv", "in_h", "in_w"};
};

// conv2d_backward_weight(x, gy): output [O, C/groups, kernel_h, kernel_w].
struct Conv2dBackwardWeightAttrs {
  Conv2dAttrs conv;
  int64_t kernel_h = 1, kernel_w = 1;

  bool operator==(const Conv2dBackwardWeightAttrs&) const = default;
  auto fields() const { return std::tie(conv, kernel_h, kernel_w); }
  static constexpr std::array<const char*, 3> names{"conv", "kernel_h", "kernel_w"};
};

// Output length of a convolution or pooling window along one axis (floor mode); may be <= 0
// when the window does not fit.
inline int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                             int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// The internal ops as graph functions (used by the vjps; handy in tests).
Tensor conv2d_backward_input(Tensor gy, Tensor w, const Conv2dAttrs& a, int64_t in_h, int64_t in_w);
Tensor conv2d_backward_weight(Tensor x, Tensor gy, const Conv2dAttrs& a, int64_t kernel_h,
                              int64_t kernel_w);

}  // namespace mn
