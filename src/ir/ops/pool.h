#pragma once
// Attributes of the pooling and resampling family (src/ir/ops/pool.cpp), read by later stages,
// and the internal ops their backward passes are written with. Inputs are [..., C, H, W]: every
// axis before the last two is a batch axis.
//
// Internal ops:
//   max_pool2d_backward(x, gy): scatters gy to each window's argmax in x (recomputed from x).
//   max_pool2d_gather(x, g):    reads g at each window's argmax in x (the adjoint of the above
//                               in gy, so max pooling is differentiable to any order).
//   avg_pool2d_backward(gy), adaptive_avg_pool2d_backward(gy), upsample_nearest2d_backward(gy),
//   upsample_bilinear2d_backward(gy): the adjoints of the (linear) forward ops; the forward op is
//   in turn the adjoint of its backward op.
#include <array>
#include <cstdint>
#include <tuple>

#include <meganeura/graph.h>

namespace mn {

// Strides are explicit here (Pool2dOptions' 0 = kernel is resolved by max_pool2d()).
struct MaxPool2dAttrs {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  bool ceil_mode = false;

  bool operator==(const MaxPool2dAttrs&) const = default;
  auto fields() const {
    return std::tie(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                    ceil_mode);
  }
  static constexpr std::array<const char*, 9> names{"kernel_h",   "kernel_w",   "stride_h",
                                                    "stride_w",   "pad_h",      "pad_w",
                                                    "dilation_h", "dilation_w", "ceil_mode"};
};

struct AvgPool2dAttrs {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;

  bool operator==(const AvgPool2dAttrs&) const = default;
  auto fields() const {
    return std::tie(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, ceil_mode,
                    count_include_pad);
  }
  static constexpr std::array<const char*, 8> names{
      "kernel_h", "kernel_w", "stride_h",  "stride_w",
      "pad_h",    "pad_w",    "ceil_mode", "count_include_pad"};
};

// avg_pool2d_backward(gy): output [..., C, in_h, in_w].
struct AvgPool2dBackwardAttrs {
  AvgPool2dAttrs pool;
  int64_t in_h = 1, in_w = 1;

  bool operator==(const AvgPool2dBackwardAttrs&) const = default;
  auto fields() const { return std::tie(pool, in_h, in_w); }
  static constexpr std::array<const char*, 3> names{"pool", "in_h", "in_w"};
};

// adaptive_avg_pool2d, upsample_nearest2d, upsample_bilinear2d (align_corners: bilinear only).
struct Resample2dAttrs {
  int64_t out_h = 1, out_w = 1;
  bool align_corners = false;

  bool operator==(const Resample2dAttrs&) const = default;
  auto fields() const { return std::tie(out_h, out_w, align_corners); }
  static constexpr std::array<const char*, 3> names{"out_h", "out_w", "align_corners"};
};

// The backward ops of the resampling ops: output [..., C, in_h, in_w].
struct Resample2dBackwardAttrs {
  int64_t in_h = 1, in_w = 1;
  bool align_corners = false;

  bool operator==(const Resample2dBackwardAttrs&) const = default;
  auto fields() const { return std::tie(in_h, in_w, align_corners); }
  static constexpr std::array<const char*, 3> names{"in_h", "in_w", "align_corners"};
};

// Pooling output length along one axis, as PyTorch computes it: in ceil mode the last window
// must start inside the input or its left padding. May be <= 0 when no window fits.
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                      bool ceil_mode);

// upsample_nearest2d's source index for output index `dst`, bit-exact with PyTorch (which
// computes floor(dst · (in/out)) in float32, with shortcuts for out = in and out = 2·in).
int64_t nearest_source_index(int64_t dst, int64_t in, int64_t out);

// The internal ops as graph functions (used by the vjps; handy in tests).
Tensor max_pool2d_backward(Tensor x, Tensor gy, const MaxPool2dAttrs& a);
Tensor max_pool2d_gather(Tensor x, Tensor g, const MaxPool2dAttrs& a);

}  // namespace mn
