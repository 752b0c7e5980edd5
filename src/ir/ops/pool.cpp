// Pooling and resampling family: max_pool2d, avg_pool2d, adaptive_avg_pool2d,
// upsample_nearest2d, upsample_bilinear2d, and their internal backward ops.
//
// All but max pooling are linear and separable: out[p, oh, ow] = Σ a·b·x[p, ih, iw] over the
// taps (ih, a) of row oh and (iw, b) of column ow. Each op is one pair of per-axis tap lists, and
// its backward op applies the transpose of the same lists, so forward and backward cannot
// disagree. Max pooling recomputes the argmax from x in its backward op (PyTorch's tie rule).
#include "ir/ops/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <meganeura/ops.h>

#include "ir/op_def.h"
#include "ir/ops/families.h"

namespace mn {

int64_t pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                      bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division (PyTorch's div_rtn): num may be negative when the window does not fit.
  int64_t out = num / stride - ((num % stride != 0 && num < 0) ? 1 : 0) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

int64_t nearest_source_index(int64_t dst, int64_t in, int64_t out) {
  if (out == in) return dst;
  if (out == 2 * in) return dst >> 1;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float src = std::floor(static_cast<float>(dst) * scale);
  return std::min(static_cast<int64_t>(src), in - 1);
}

namespace {

// ---- shapes ----

int64_t planes_of(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 2 < s.size(); ++i) n *= s[i];
  return n;
}

Shape with_hw(const Shape& s, int64_t h, int64_t w) {
  Shape out(s.begin(), s.end() - 2);
  out.insert(out.end(), {h, w});
  return out;
}

int64_t dim_h(const TensorType& t) { return t.shape[t.shape.size() - 2]; }
int64_t dim_w(const TensorType& t) { return t.shape[t.shape.size() - 1]; }

void check_images(std::string_view op, std::span<const TensorType> in) {
  for (const TensorType& t : in) {
    if (t.rank() < 3) shape_fail(op, in, "expected inputs of rank >= 3 ([..., C, H, W])");
    if (!is_float(t.dtype) || t.dtype != in[0].dtype) {
      shape_fail(op, in, "expected float inputs of one dtype");
    }
  }
}

// PyTorch's pooling checks: positive kernel, stride, dilation; padding at most half the kernel.
void check_window(std::string_view op, std::span<const TensorType> in, const Attrs& attrs,
                  int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                  int64_t dh, int64_t dw) {
  if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || ph < 0 || pw < 0) {
    shape_fail(op, in,
               "expected kernel, stride, dilation >= 1 and padding >= 0, got " + attrs.str());
  }
  if (ph > kh / 2 || pw > kw / 2) {
    shape_fail(op, in, "expected padding <= kernel / 2, got " + attrs.str());
  }
}

Shape max_pool_out(std::string_view op, std::span<const TensorType> in, const MaxPool2dAttrs& a) {
  check_window(op, in, a, a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h, a.pad_w,
               a.dilation_h, a.dilation_w);
  const int64_t oh =
      pool_out_size(dim_h(in[0]), a.kernel_h, a.stride_h, a.pad_h, a.dilation_h, a.ceil_mode);
  const int64_t ow =
      pool_out_size(dim_w(in[0]), a.kernel_w, a.stride_w, a.pad_w, a.dilation_w, a.ceil_mode);
  if (oh < 1 || ow < 1) shape_fail(op, in, "expected the pooling window to fit the padded input");
  return with_hw(in[0].shape, oh, ow);
}

// Output H×W of avg pooling an in_h×in_w input.
std::pair<int64_t, int64_t> avg_pool_hw(std::string_view op, std::span<const TensorType> in,
                                        const AvgPool2dAttrs& a, int64_t in_h, int64_t in_w) {
  check_window(op, in, a, a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h, a.pad_w, 1, 1);
  const int64_t oh = pool_out_size(in_h, a.kernel_h, a.stride_h, a.pad_h, 1, a.ceil_mode);
  const int64_t ow = pool_out_size(in_w, a.kernel_w, a.stride_w, a.pad_w, 1, a.ceil_mode);
  if (oh < 1 || ow < 1) shape_fail(op, in, "expected the pooling window to fit the padded input");
  return {oh, ow};
}

TensorType infer_max_pool2d(const Attrs& attrs, std::span<const TensorType> in) {
  check_images("max_pool2d", in);
  return {max_pool_out("max_pool2d", in, attrs.as<MaxPool2dAttrs>()), in[0].dtype};
}

// max_pool2d_backward(x, gy) -> like x; max_pool2d_gather(x, g) -> like max_pool2d(x).
template <bool kGather>
TensorType infer_max_pool2d_adjoint(const Attrs& attrs, std::span<const TensorType> in) {
  const char* op = kGather ? "max_pool2d_gather" : "max_pool2d_backward";
  check_images(op, in);
  Shape pooled = max_pool_out(op, in, attrs.as<MaxPool2dAttrs>());
  if (kGather ? in[1].shape != in[0].shape : in[1].shape != pooled) {
    shape_fail(op, in,
               std::string("expected the second input of shape ") +
                   shape_str(kGather ? in[0].shape : pooled));
  }
  return {kGather ? pooled : in[0].shape, in[0].dtype};
}

TensorType infer_avg_pool2d(const Attrs& attrs, std::span<const TensorType> in) {
  check_images("avg_pool2d", in);
  auto [oh, ow] =
      avg_pool_hw("avg_pool2d", in, attrs.as<AvgPool2dAttrs>(), dim_h(in[0]), dim_w(in[0]));
  return {with_hw(in[0].shape, oh, ow), in[0].dtype};
}

TensorType infer_avg_pool2d_backward(const Attrs& attrs, std::span<const TensorType> in) {
  const char* op = "avg_pool2d_backward";
  const auto& b = attrs.as<AvgPool2dBackwardAttrs>();
  check_images(op, in);
  if (b.in_h < 1 || b.in_w < 1) shape_fail(op, in, "expected in_h, in_w >= 1");
  auto [oh, ow] = avg_pool_hw(op, in, b.pool, b.in_h, b.in_w);
  if (oh != dim_h(in[0]) || ow != dim_w(in[0])) {
    shape_fail(op, in,
               "expected gy of spatial size [" + std::to_string(oh) + ", " + std::to_string(ow) +
                   "] (avg_pool2d of " + attrs.str() + ")");
  }
  return {with_hw(in[0].shape, b.in_h, b.in_w), in[0].dtype};
}

template <const char* kName>
TensorType infer_resample(const Attrs& attrs, std::span<const TensorType> in) {
  const auto& a = attrs.as<Resample2dAttrs>();
  check_images(kName, in);
  if (a.out_h < 1 || a.out_w < 1) shape_fail(kName, in, "expected out_h, out_w >= 1");
  return {with_hw(in[0].shape, a.out_h, a.out_w), in[0].dtype};
}

template <const char* kName>
TensorType infer_resample_backward(const Attrs& attrs, std::span<const TensorType> in) {
  const auto& a = attrs.as<Resample2dBackwardAttrs>();
  check_images(kName, in);
  if (a.in_h < 1 || a.in_w < 1) shape_fail(kName, in, "expected in_h, in_w >= 1");
  return {with_hw(in[0].shape, a.in_h, a.in_w), in[0].dtype};
}

constexpr char kAdaptive[] = "adaptive_avg_pool2d";
constexpr char kAdaptiveBackward[] = "adaptive_avg_pool2d_backward";
constexpr char kNearest[] = "upsample_nearest2d";
constexpr char kNearestBackward[] = "upsample_nearest2d_backward";
constexpr char kBilinear[] = "upsample_bilinear2d";
constexpr char kBilinearBackward[] = "upsample_bilinear2d_backward";

// ---- separable linear maps ----

struct Tap {
  int64_t index;
  double weight;
};
using AxisMap = std::vector<std::vector<Tap>>;  // per output index, its input taps

// PyTorch's avg pool window: clipped to the padded input for the count_include_pad divisor,
// then to the input for the taps and the count_include_pad=false divisor. Both divisors are
// products of a per-axis count, so the weights factor per axis.
AxisMap avg_axis(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool include_pad) {
  AxisMap m(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - p;
    const int64_t end = std::min(start + k, in + p);
    const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, in);
    if (lo >= hi) continue;
    const double w = 1.0 / static_cast<double>(include_pad ? end - start : hi - lo);
    for (int64_t i = lo; i < hi; ++i) m[o].push_back({i, w});
  }
  return m;
}

// Bins [floor(o·in/out), ceil((o+1)·in/out)), as PyTorch's start_index/end_index.
AxisMap adaptive_axis(int64_t in, int64_t out) {
  AxisMap m(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t lo = (o * in) / out, hi = ((o + 1) * in + out - 1) / out;
    for (int64_t i = lo; i < hi; ++i) m[o].push_back({i, 1.0 / static_cast<double>(hi - lo)});
  }
  return m;
}

AxisMap nearest_axis(int64_t in, int64_t out) {
  AxisMap m(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) m[o].push_back({nearest_source_index(o, in, out), 1.0});
  return m;
}

// PyTorch's area_pixel_compute_source_index (linear mode) with its neighbor and lambda rules.
AxisMap bilinear_axis(int64_t in, int64_t out, bool align_corners) {
  AxisMap m(static_cast<size_t>(out));
  const double scale =
      align_corners ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                    : static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    double src = align_corners ? scale * static_cast<double>(o)
                               : scale * (static_cast<double>(o) + 0.5) - 0.5;
    if (src < 0) src = 0;
    const auto i0 = static_cast<int64_t>(src);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const double l1 = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
    m[o].push_back({i0, 1.0 - l1});
    m[o].push_back({i1, l1});
  }
  return m;
}

// x: planes of in_h×in_w -> y: planes of |mh|×|mw|.
void separable_apply(const AxisMap& mh, const AxisMap& mw, int64_t planes, int64_t in_h,
                     int64_t in_w, const double* x, double* y) {
  const auto oh_n = static_cast<int64_t>(mh.size()), ow_n = static_cast<int64_t>(mw.size());
  for (int64_t p = 0; p < planes; ++p) {
    const double* xp = x + p * in_h * in_w;
    double* yp = y + p * oh_n * ow_n;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        double acc = 0.0;
        for (const Tap& th : mh[oh]) {
          const double* row = xp + th.index * in_w;
          double inner = 0.0;
          for (const Tap& tw : mw[ow]) inner += tw.weight * row[tw.index];
          acc += th.weight * inner;
        }
        yp[oh * ow_n + ow] = acc;
      }
    }
  }
}

// The transpose: gy planes of |mh|×|mw| -> gx planes of in_h×in_w.
void separable_adjoint(const AxisMap& mh, const AxisMap& mw, int64_t planes, int64_t in_h,
                       int64_t in_w, const double* gy, double* gx) {
  const auto oh_n = static_cast<int64_t>(mh.size()), ow_n = static_cast<int64_t>(mw.size());
  for (int64_t p = 0; p < planes; ++p) {
    double* xp = gx + p * in_h * in_w;
    const double* yp = gy + p * oh_n * ow_n;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (const Tap& th : mh[oh]) {
        double* row = xp + th.index * in_w;
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          const double g = th.weight * yp[oh * ow_n + ow];
          for (const Tap& tw : mw[ow]) row[tw.index] += tw.weight * g;
        }
      }
    }
  }
}

// Per-axis maps of a linear op, given its attributes (forward or backward struct) and the
// input (big side for backward ops: the forward's input) and output sizes of the forward op.
using MapsFn = std::function<std::pair<AxisMap, AxisMap>(const Attrs&, int64_t in_h, int64_t in_w,
                                                         int64_t out_h, int64_t out_w)>;

// A forward op maps its input to the node's shape; a backward op maps gy (the forward's output
// size) back to the node's shape (the forward's input size).
EvalFn separable_eval(MapsFn maps, bool adjoint) {
  return [maps = std::move(maps), adjoint](const Node& n, std::span<const Array* const> in) {
    const Array& x = *in[0];
    Array y(n.type.shape, n.type.dtype);
    const TensorType& big = adjoint ? n.type : x.type();
    const TensorType& small = adjoint ? x.type() : n.type;
    auto [mh, mw] = maps(n.attrs, dim_h(big), dim_w(big), dim_h(small), dim_w(small));
    const int64_t planes = planes_of(y.shape);
    if (adjoint) {
      separable_adjoint(mh, mw, planes, dim_h(big), dim_w(big), x.data.data(), y.data.data());
    } else {
      separable_apply(mh, mw, planes, dim_h(big), dim_w(big), x.data.data(), y.data.data());
    }
    return y;
  };
}

std::pair<AxisMap, AxisMap> avg_maps(const AvgPool2dAttrs& a, int64_t ih, int64_t iw, int64_t oh,
                                     int64_t ow) {
  return {avg_axis(ih, oh, a.kernel_h, a.stride_h, a.pad_h, a.count_include_pad),
          avg_axis(iw, ow, a.kernel_w, a.stride_w, a.pad_w, a.count_include_pad)};
}

// ---- max pooling ----

// Per output element, the offset within its H×W plane of its window's maximum, as PyTorch's CPU
// kernel picks it: scanning rows then columns, a value wins if it is greater than the best so
// far or NaN (so the first maximum wins ties and a NaN propagates); padding never wins. -1 marks
// a window with no element inside the input.
std::vector<int64_t> window_argmax(const MaxPool2dAttrs& a, const Array& x, int64_t oh_n,
                                   int64_t ow_n) {
  const int64_t h = x.shape[x.shape.size() - 2], w = x.shape[x.shape.size() - 1];
  const int64_t planes = planes_of(x.shape);
  // Window bounds per output column, hoisted out of the plane and row loops.
  std::vector<int64_t> w0(static_cast<size_t>(ow_n)), w1(static_cast<size_t>(ow_n));
  for (int64_t ow = 0; ow < ow_n; ++ow) {
    int64_t s = ow * a.stride_w - a.pad_w;
    w1[ow] = std::min(s + (a.kernel_w - 1) * a.dilation_w + 1, w);
    while (s < 0) s += a.dilation_w;
    w0[ow] = s;
  }
  std::vector<int64_t> idx(static_cast<size_t>(planes * oh_n * ow_n));
  size_t k = 0;
  for (int64_t p = 0; p < planes; ++p) {
    const double* xp = x.data.data() + p * h * w;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      int64_t h0 = oh * a.stride_h - a.pad_h;
      const int64_t h1 = std::min(h0 + (a.kernel_h - 1) * a.dilation_h + 1, h);
      while (h0 < 0) h0 += a.dilation_h;
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        int64_t best = (h0 < h1 && w0[ow] < w1[ow]) ? h0 * w + w0[ow] : -1;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t ih = h0; ih < h1; ih += a.dilation_h) {
          for (int64_t iw = w0[ow]; iw < w1[ow]; iw += a.dilation_w) {
            const double v = xp[ih * w + iw];
            if (v > m || std::isnan(v)) {
              m = v;
              best = ih * w + iw;
            }
          }
        }
        idx[k++] = best;
      }
    }
  }
  return idx;
}

Array eval_max_pool2d(const Node& n, std::span<const Array* const> in) {
  const Array& x = *in[0];
  Array y(n.type.shape, n.type.dtype);
  const int64_t oh = y.shape[y.shape.size() - 2], ow = y.shape[y.shape.size() - 1];
  const auto idx = window_argmax(n.attrs.as<MaxPool2dAttrs>(), x, oh, ow);
  const int64_t plane = x.shape[x.shape.size() - 2] * x.shape[x.shape.size() - 1];
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t p = static_cast<int64_t>(k) / (oh * ow);
    y.data[k] = idx[k] < 0 ? -std::numeric_limits<double>::infinity()
                           : x.data[static_cast<size_t>(p * plane + idx[k])];
  }
  return y;
}

// max_pool2d_backward: out (like x) += gy at the argmax; max_pool2d_gather: out = g at it.
template <bool kGather>
Array eval_max_pool2d_adjoint(const Node& n, std::span<const Array* const> in) {
  const Array& x = *in[0];
  const Array& g = *in[1];
  Array out(n.type.shape, n.type.dtype);
  const Shape& pooled = kGather ? out.shape : g.shape;
  const int64_t oh = pooled[pooled.size() - 2], ow = pooled[pooled.size() - 1];
  const auto idx = window_argmax(n.attrs.as<MaxPool2dAttrs>(), x, oh, ow);
  const int64_t plane = x.shape[x.shape.size() - 2] * x.shape[x.shape.size() - 1];
  for (size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] < 0) continue;
    const auto src = static_cast<size_t>(static_cast<int64_t>(k) / (oh * ow) * plane + idx[k]);
    if constexpr (kGather) {
      out.data[k] = g.data[src];
    } else {
      out.data[src] += g.data[k];
    }
  }
  return out;
}

// ---- backward rules ----

Tensor apply1(const char* op, Attrs attrs, Tensor x) { return x.graph().apply(op, attrs, {x}); }

std::vector<Tensor> vjp_max_pool2d(const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
  return {max_pool2d_backward(in[0], cot, n.attrs.as<MaxPool2dAttrs>())};
}

// The argmax is piecewise constant in x: no gradient flows to x from either adjoint op.
std::vector<Tensor> vjp_max_pool2d_backward(const Node& n, std::span<const Tensor> in, Tensor,
                                            Tensor cot) {
  return {Tensor{}, max_pool2d_gather(in[0], cot, n.attrs.as<MaxPool2dAttrs>())};
}

std::vector<Tensor> vjp_max_pool2d_gather(const Node& n, std::span<const Tensor> in, Tensor,
                                          Tensor cot) {
  return {Tensor{}, max_pool2d_backward(in[0], cot, n.attrs.as<MaxPool2dAttrs>())};
}

std::vector<Tensor> vjp_avg_pool2d(const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
  AvgPool2dBackwardAttrs b{n.attrs.as<AvgPool2dAttrs>(), in[0].dim(-2), in[0].dim(-1)};
  return {apply1("avg_pool2d_backward", b, cot)};
}

std::vector<Tensor> vjp_avg_pool2d_backward(const Node& n, std::span<const Tensor>, Tensor,
                                            Tensor cot) {
  return {apply1("avg_pool2d", n.attrs.as<AvgPool2dBackwardAttrs>().pool, cot)};
}

// Resampling op <-> its backward op, each the other's adjoint.
VjpFn resample_vjp(const char* backward_op) {
  return [backward_op](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
    const auto& a = n.attrs.as<Resample2dAttrs>();
    Resample2dBackwardAttrs b{in[0].dim(-2), in[0].dim(-1), a.align_corners};
    return std::vector<Tensor>{apply1(backward_op, b, cot)};
  };
}

VjpFn resample_backward_vjp(const char* forward_op) {
  return [forward_op](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
    const auto& b = n.attrs.as<Resample2dBackwardAttrs>();
    Resample2dAttrs a{in[0].dim(-2), in[0].dim(-1), b.align_corners};
    return std::vector<Tensor>{apply1(forward_op, a, cot)};
  };
}

// ---- samples ----

OpSample sample(std::string label, std::vector<Shape> shapes, Attrs attrs) {
  OpSample s{std::move(label), {}, std::move(attrs)};
  for (Shape& sh : shapes) {
    s.inputs.push_back({std::move(sh), DType::f32});
    s.ranges.emplace_back(-1.0, 1.0);
  }
  return s;
}

MaxPool2dAttrs max_attrs(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                         int64_t dh, int64_t dw, bool ceil) {
  return {kh, kw, sh, sw, ph, pw, dh, dw, ceil};
}

// (label, x shape, attrs) of the max pooling cases; the adjoint ops reuse them.
struct MaxCase {
  const char* label;
  Shape x;
  MaxPool2dAttrs a;
};
std::vector<MaxCase> max_cases() {
  return {
      {"k2_batch", {2, 3, 4, 4}, max_attrs(2, 2, 2, 2, 0, 0, 1, 1, false)},
      {"k3_s2_pad1", {1, 2, 7, 7}, max_attrs(3, 3, 2, 2, 1, 1, 1, 1, false)},
      {"ceil_odd", {1, 2, 5, 7}, max_attrs(2, 2, 2, 2, 0, 0, 1, 1, true)},
      {"dilation2_pad1", {1, 2, 7, 8}, max_attrs(3, 3, 1, 1, 1, 1, 2, 2, false)},
      {"rect_ceil", {2, 1, 6, 5}, max_attrs(3, 2, 2, 1, 1, 0, 1, 1, true)},
      {"unbatched_overlap", {3, 5, 5}, max_attrs(3, 3, 2, 2, 0, 0, 1, 1, false)},
      {"dilation_ceil_pad", {1, 1, 9, 9}, max_attrs(3, 3, 2, 2, 1, 1, 2, 2, true)},
  };
}

Shape pooled_shape(const MaxCase& c) {
  const MaxPool2dAttrs& a = c.a;
  return with_hw(c.x,
                 pool_out_size(c.x[c.x.size() - 2], a.kernel_h, a.stride_h, a.pad_h, a.dilation_h,
                               a.ceil_mode),
                 pool_out_size(c.x[c.x.size() - 1], a.kernel_w, a.stride_w, a.pad_w, a.dilation_w,
                               a.ceil_mode));
}

// which: 0 = max_pool2d, 1 = max_pool2d_backward, 2 = max_pool2d_gather.
SamplesFn max_samples(int which) {
  return [which] {
    std::vector<OpSample> out;
    for (const MaxCase& c : max_cases()) {
      std::vector<Shape> shapes{c.x};
      if (which == 1) shapes.push_back(pooled_shape(c));
      if (which == 2) shapes.push_back(c.x);
      out.push_back(sample(c.label, shapes, c.a));
    }
    return out;
  };
}

struct AvgCase {
  const char* label;
  Shape x;
  AvgPool2dAttrs a;
};
std::vector<AvgCase> avg_cases() {
  auto a = [](int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool ceil,
              bool include) { return AvgPool2dAttrs{kh, kw, sh, sw, ph, pw, ceil, include}; };
  return {
      {"k2_batch", {2, 3, 4, 4}, a(2, 2, 2, 2, 0, 0, false, true)},
      {"k3_s2_pad1_include", {1, 2, 7, 7}, a(3, 3, 2, 2, 1, 1, false, true)},
      {"k3_s2_pad1_exclude", {1, 2, 7, 7}, a(3, 3, 2, 2, 1, 1, false, false)},
      {"ceil_pad_include", {1, 2, 5, 6}, a(3, 3, 2, 2, 1, 1, true, true)},
      {"ceil_pad_exclude", {1, 2, 5, 6}, a(3, 3, 2, 2, 1, 1, true, false)},
      {"rect", {2, 1, 6, 5}, a(3, 2, 1, 2, 1, 1, false, true)},
      {"unbatched_ceil", {2, 5, 5}, a(2, 2, 2, 2, 0, 0, true, false)},
  };
}

SamplesFn avg_samples(bool backward) {
  return [backward] {
    std::vector<OpSample> out;
    for (const AvgCase& c : avg_cases()) {
      if (!backward) {
        out.push_back(sample(c.label, {c.x}, c.a));
        continue;
      }
      const int64_t ih = c.x[c.x.size() - 2], iw = c.x[c.x.size() - 1];
      Shape gy =
          with_hw(c.x, pool_out_size(ih, c.a.kernel_h, c.a.stride_h, c.a.pad_h, 1, c.a.ceil_mode),
                  pool_out_size(iw, c.a.kernel_w, c.a.stride_w, c.a.pad_w, 1, c.a.ceil_mode));
      out.push_back(sample(c.label, {gy}, AvgPool2dBackwardAttrs{c.a, ih, iw}));
    }
    return out;
  };
}

// (label, input shape, output H×W, align_corners) of the resampling cases.
struct ResampleCase {
  const char* label;
  Shape x;
  int64_t out_h, out_w;
  bool align_corners;
};

SamplesFn resample_samples(std::vector<ResampleCase> cases, bool backward) {
  return [cases = std::move(cases), backward] {
    std::vector<OpSample> out;
    for (const ResampleCase& c : cases) {
      const int64_t ih = c.x[c.x.size() - 2], iw = c.x[c.x.size() - 1];
      if (backward) {
        out.push_back(sample(c.label, {with_hw(c.x, c.out_h, c.out_w)},
                             Resample2dBackwardAttrs{ih, iw, c.align_corners}));
      } else {
        out.push_back(sample(c.label, {c.x}, Resample2dAttrs{c.out_h, c.out_w, c.align_corners}));
      }
    }
    return out;
  };
}

std::vector<ResampleCase> adaptive_cases() {
  return {{"down_uneven", {2, 3, 5, 7}, 3, 4, false},
          {"global", {1, 2, 6, 6}, 1, 1, false},
          {"up_overlapping_bins", {1, 2, 3, 5}, 5, 7, false},
          {"identity_unbatched", {3, 4, 4}, 4, 4, false}};
}

std::vector<ResampleCase> nearest_cases() {
  return {{"up_fractional", {1, 2, 3, 4}, 5, 7, false},
          {"up_2x", {2, 1, 4, 4}, 8, 8, false},
          {"down", {1, 2, 5, 6}, 3, 4, false},
          {"float_rounding_2_to_82", {1, 1, 1, 2}, 1, 82, false},
          {"identity_unbatched", {2, 3, 3}, 3, 3, false}};
}

std::vector<ResampleCase> bilinear_cases() {
  return {{"up", {1, 2, 3, 4}, 5, 7, false},
          {"up_align", {1, 2, 3, 4}, 5, 7, true},
          {"down", {1, 2, 6, 5}, 3, 2, false},
          {"down_align", {2, 1, 6, 5}, 3, 2, true},
          {"to_1x1", {1, 1, 4, 4}, 1, 1, false},
          {"to_1x1_align", {1, 1, 4, 4}, 1, 1, true},
          {"same_size_unbatched", {2, 2, 3}, 2, 3, false}};
}

void add_resample(OpRegistry& r, const char* name, const char* backward_name, InferFn infer,
                  InferFn infer_backward, MapsFn maps, std::vector<ResampleCase> cases,
                  const char* summary, const char* backward_summary) {
  r.add({.name = name,
         .arity = 1,
         .archetype = Archetype::window,
         .infer = std::move(infer),
         .eval = separable_eval(maps, false),
         .vjp = resample_vjp(backward_name),
         .samples = resample_samples(cases, false),
         .summary = summary});
  r.add({.name = backward_name,
         .arity = 1,
         .archetype = Archetype::window,
         .infer = std::move(infer_backward),
         .eval = separable_eval(maps, true),
         .vjp = resample_backward_vjp(name),
         .samples = resample_samples(cases, true),
         .summary = backward_summary,
         .internal = true});
}

bool align_corners_of(const Attrs& a) {
  return a.is<Resample2dAttrs>() ? a.as<Resample2dAttrs>().align_corners
                                 : a.as<Resample2dBackwardAttrs>().align_corners;
}

}  // namespace

Tensor max_pool2d_backward(Tensor x, Tensor gy, const MaxPool2dAttrs& a) {
  return x.graph().apply("max_pool2d_backward", a, {x, gy});
}

Tensor max_pool2d_gather(Tensor x, Tensor g, const MaxPool2dAttrs& a) {
  return x.graph().apply("max_pool2d_gather", a, {x, g});
}

Tensor max_pool2d(Tensor x, Pool2dOptions opt) {
  MaxPool2dAttrs a{opt.kernel[0],
                   opt.kernel[1],
                   opt.stride[0] == 0 ? opt.kernel[0] : opt.stride[0],
                   opt.stride[1] == 0 ? opt.kernel[1] : opt.stride[1],
                   opt.padding[0],
                   opt.padding[1],
                   opt.dilation[0],
                   opt.dilation[1],
                   opt.ceil_mode};
  return apply1("max_pool2d", a, x);
}

Tensor avg_pool2d(Tensor x, Pool2dOptions opt) {
  if (opt.dilation[0] != 1 || opt.dilation[1] != 1) {
    throw ShapeError("avg_pool2d: dilation is not supported (got [" +
                     std::to_string(opt.dilation[0]) + ", " + std::to_string(opt.dilation[1]) +
                     "]; it applies to max_pool2d only)");
  }
  AvgPool2dAttrs a{opt.kernel[0],
                   opt.kernel[1],
                   opt.stride[0] == 0 ? opt.kernel[0] : opt.stride[0],
                   opt.stride[1] == 0 ? opt.kernel[1] : opt.stride[1],
                   opt.padding[0],
                   opt.padding[1],
                   opt.ceil_mode,
                   opt.count_include_pad};
  return apply1("avg_pool2d", a, x);
}

Tensor adaptive_avg_pool2d(Tensor x, int64_t out_h, int64_t out_w) {
  return apply1(kAdaptive, Resample2dAttrs{out_h, out_w, false}, x);
}

Tensor upsample_nearest2d(Tensor x, int64_t out_h, int64_t out_w) {
  return apply1(kNearest, Resample2dAttrs{out_h, out_w, false}, x);
}

Tensor upsample_bilinear2d(Tensor x, int64_t out_h, int64_t out_w, bool align_corners) {
  return apply1(kBilinear, Resample2dAttrs{out_h, out_w, align_corners}, x);
}

void register_pool_ops(OpRegistry& r) {
  r.add({.name = "max_pool2d",
         .arity = 1,
         .archetype = Archetype::window,
         .infer = infer_max_pool2d,
         .eval = eval_max_pool2d,
         .vjp = vjp_max_pool2d,
         .samples = max_samples(0),
         .summary = "2-D max pooling (padding is -inf; dilation, ceil_mode as PyTorch)"});
  r.add({.name = "max_pool2d_backward",
         .arity = 2,
         .archetype = Archetype::window,
         .infer = infer_max_pool2d_adjoint<false>,
         .eval = eval_max_pool2d_adjoint<false>,
         .vjp = vjp_max_pool2d_backward,
         .samples = max_samples(1),
         .summary = "max_pool2d's input gradient: gy scattered to each window's argmax of x",
         .internal = true});
  r.add({.name = "max_pool2d_gather",
         .arity = 2,
         .archetype = Archetype::window,
         .infer = infer_max_pool2d_adjoint<true>,
         .eval = eval_max_pool2d_adjoint<true>,
         .vjp = vjp_max_pool2d_gather,
         .samples = max_samples(2),
         .summary = "g read at each max_pool2d window's argmax of x (adjoint of the backward)",
         .internal = true});

  auto avg = [](const Attrs& attrs, int64_t ih, int64_t iw, int64_t oh, int64_t ow) {
    return avg_maps(attrs.is<AvgPool2dAttrs>() ? attrs.as<AvgPool2dAttrs>()
                                               : attrs.as<AvgPool2dBackwardAttrs>().pool,
                    ih, iw, oh, ow);
  };
  r.add({.name = "avg_pool2d",
         .arity = 1,
         .archetype = Archetype::window,
         .infer = infer_avg_pool2d,
         .eval = separable_eval(avg, false),
         .vjp = vjp_avg_pool2d,
         .samples = avg_samples(false),
         .summary = "2-D average pooling (count_include_pad, ceil_mode as PyTorch)"});
  r.add({.name = "avg_pool2d_backward",
         .arity = 1,
         .archetype = Archetype::window,
         .infer = infer_avg_pool2d_backward,
         .eval = separable_eval(avg, true),
         .vjp = vjp_avg_pool2d_backward,
         .samples = avg_samples(true),
         .summary = "avg_pool2d's input gradient (its adjoint)",
         .internal = true});

  add_resample(
      r, kAdaptive, kAdaptiveBackward, infer_resample<kAdaptive>,
      infer_resample_backward<kAdaptiveBackward>,
      [](const Attrs&, int64_t ih, int64_t iw, int64_t oh, int64_t ow) {
        return std::pair{adaptive_axis(ih, oh), adaptive_axis(iw, ow)};
      },
      adaptive_cases(), "adaptive average pooling to out_h×out_w (PyTorch's bins)",
      "adaptive_avg_pool2d's input gradient (its adjoint)");
  add_resample(
      r, kNearest, kNearestBackward, infer_resample<kNearest>,
      infer_resample_backward<kNearestBackward>,
      [](const Attrs&, int64_t ih, int64_t iw, int64_t oh, int64_t ow) {
        return std::pair{nearest_axis(ih, oh), nearest_axis(iw, ow)};
      },
      nearest_cases(), "nearest-neighbor resize to out_h×out_w (PyTorch's 'nearest')",
      "upsample_nearest2d's input gradient (its adjoint)");
  add_resample(
      r, kBilinear, kBilinearBackward, infer_resample<kBilinear>,
      infer_resample_backward<kBilinearBackward>,
      [](const Attrs& a, int64_t ih, int64_t iw, int64_t oh, int64_t ow) {
        const bool ac = align_corners_of(a);
        return std::pair{bilinear_axis(ih, oh, ac), bilinear_axis(iw, ow, ac)};
      },
      bilinear_cases(), "bilinear resize to out_h×out_w (align_corners as PyTorch)",
      "upsample_bilinear2d's input gradient (its adjoint)");
}

}  // namespace mn
