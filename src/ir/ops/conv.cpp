// Convolution family: conv2d, conv_transpose2d, and the internal ops their backward passes are
// written with (conv2d_backward_input, conv2d_backward_weight). The four ops are closed under
// differentiation, so gradients of any order stay inside the family (plus sum/slice).
#include "ir/ops/conv.h"

#include <algorithm>
#include <string>

#include <meganeura/ops.h>

#include "ir/op_def.h"
#include "ir/ops/families.h"

namespace mn {

namespace {

// A convolution's geometry in the terms of the forward conv2d: input [batch, c_in, in_h, in_w],
// weight [c_out, c_in/groups, k_h, k_w], output [batch, c_out, out_h, out_w]. conv2d evaluates
// the map input -> output; the backward ops and conv_transpose2d evaluate its adjoints.
struct ConvGeom {
  Conv2dAttrs a;
  int64_t batch = 1, c_in = 0, in_h = 0, in_w = 0;
  int64_t c_out = 0, out_h = 0, out_w = 0;
  int64_t k_h = 0, k_w = 0;
};

int64_t leading_numel(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 3 < s.size(); ++i) n *= s[i];
  return n;
}

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 3); }

// Output positions o in [lo, hi) (within [0, out)) whose input position o·stride + offset lies
// in [0, in).
struct Range {
  int64_t lo, hi;
};
Range valid_range(int64_t out, int64_t in, int64_t stride, int64_t offset) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = in - 1 - offset;
  const int64_t hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {lo, std::max(lo, hi)};
}

// Visits every (input row, output row, weight element) triple the convolution connects, with the
// range of output columns it covers: f(x_row, y_row, w_index, ow_lo, ow_hi) where input column
// ow·stride_w of x_row meets output column ow of y_row. Bounds are hoisted out of the inner loop
// so the callers' column loops are plain strided dot products / axpys.
template <class F>
void for_each_tap(const ConvGeom& g, F&& f) {
  const Conv2dAttrs& a = g.a;
  const int64_t cg = g.c_in / a.groups, og = g.c_out / a.groups;
  const int64_t in_plane = g.in_h * g.in_w, out_plane = g.out_h * g.out_w;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t oc = 0; oc < g.c_out; ++oc) {
      const int64_t group = oc / og;
      const int64_t y_plane = (n * g.c_out + oc) * out_plane;
      for (int64_t c = 0; c < cg; ++c) {
        const int64_t x_plane = (n * g.c_in + group * cg + c) * in_plane;
        for (int64_t i = 0; i < g.k_h; ++i) {
          const int64_t off_h = i * a.dilation_h - a.pad_h;
          const Range rh = valid_range(g.out_h, g.in_h, a.stride_h, off_h);
          for (int64_t j = 0; j < g.k_w; ++j) {
            const int64_t off_w = j * a.dilation_w - a.pad_w;
            const Range rw = valid_range(g.out_w, g.in_w, a.stride_w, off_w);
            if (rw.lo >= rw.hi) continue;
            const int64_t w_index = ((oc * cg + c) * g.k_h + i) * g.k_w + j;
            for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
              f(x_plane + (oh * a.stride_h + off_h) * g.in_w + off_w, y_plane + oh * g.out_w,
                w_index, rw.lo, rw.hi);
            }
          }
        }
      }
    }
  }
}

// y = conv(x, w) (+ bias), y of shape [batch, c_out, out_h, out_w].
void conv_forward(const ConvGeom& g, const double* x, const double* w, const double* bias,
                  double* y) {
  const int64_t out_plane = g.out_h * g.out_w, sw = g.a.stride_w;
  if (bias) {
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t oc = 0; oc < g.c_out; ++oc) {
        std::fill_n(y + (n * g.c_out + oc) * out_plane, out_plane, bias[oc]);
      }
    }
  }
  for_each_tap(g, [&](int64_t xr, int64_t yr, int64_t wi, int64_t lo, int64_t hi) {
    const double wv = w[wi];
    const double* xp = x + xr;
    double* yp = y + yr;
    for (int64_t ow = lo; ow < hi; ++ow) yp[ow] += wv * xp[ow * sw];
  });
}

// dx = conv_x^T(gy, w): the adjoint of conv_forward in x.
void conv_backward_input(const ConvGeom& g, const double* gy, const double* w, double* dx) {
  const int64_t sw = g.a.stride_w;
  for_each_tap(g, [&](int64_t xr, int64_t yr, int64_t wi, int64_t lo, int64_t hi) {
    const double wv = w[wi];
    double* xp = dx + xr;
    const double* yp = gy + yr;
    for (int64_t ow = lo; ow < hi; ++ow) xp[ow * sw] += wv * yp[ow];
  });
}

// dw = conv_w^T(x, gy): the adjoint of conv_forward in w.
void conv_backward_weight(const ConvGeom& g, const double* x, const double* gy, double* dw) {
  const int64_t sw = g.a.stride_w;
  for_each_tap(g, [&](int64_t xr, int64_t yr, int64_t wi, int64_t lo, int64_t hi) {
    const double* xp = x + xr;
    const double* yp = gy + yr;
    double acc = 0.0;
    for (int64_t ow = lo; ow < hi; ++ow) acc += xp[ow * sw] * yp[ow];
    dw[wi] += acc;
  });
}

// ---- shape inference ----

void check_float_operands(std::string_view op, std::span<const TensorType> in) {
  for (const TensorType& t : in) {
    if (!is_float(t.dtype) || t.dtype != in[0].dtype) {
      shape_fail(op, in, "expected float operands of one dtype");
    }
  }
}

void check_conv_attrs(std::string_view op, const Conv2dAttrs& a, std::span<const TensorType> in) {
  if (a.stride_h < 1 || a.stride_w < 1 || a.dilation_h < 1 || a.dilation_w < 1 || a.groups < 1 ||
      a.pad_h < 0 || a.pad_w < 0) {
    shape_fail(op, in,
               "expected stride, dilation, groups >= 1 and padding >= 0, got " + Attrs(a).str());
  }
}

void check_image(std::string_view op, std::span<const TensorType> in, size_t i, const char* what) {
  if (in[i].rank() < 3) {
    shape_fail(op, in, std::string("expected ") + what + " of rank >= 3 ([..., C, H, W])");
  }
}

void check_groups(std::string_view op, std::span<const TensorType> in, int64_t c, int64_t o,
                  int64_t groups) {
  if (c % groups != 0 || o % groups != 0) {
    shape_fail(op, in,
               "expected input channels (" + std::to_string(c) + ") and output channels (" +
                   std::to_string(o) + ") divisible by groups (" + std::to_string(groups) + ")");
  }
}

void check_bias(std::string_view op, std::span<const TensorType> in, int64_t channels) {
  if (in.size() == 3 && in[2].shape != Shape{channels}) {
    shape_fail(op, in, "expected bias of shape [" + std::to_string(channels) + "]");
  }
}

TensorType infer_conv2d(const Attrs& attrs, std::span<const TensorType> in) {
  const char* op = "conv2d";
  const auto& a = attrs.as<Conv2dAttrs>();
  if (in.size() != 2 && in.size() != 3) shape_fail(op, in, "expected inputs (x, w[, bias])");
  check_float_operands(op, in);
  check_conv_attrs(op, a, in);
  check_image(op, in, 0, "x");
  if (in[1].rank() != 4) shape_fail(op, in, "expected w of shape [O, C/groups, kh, kw]");
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  const int64_t c = x[x.size() - 3], o = w[0];
  check_groups(op, in, c, o, a.groups);
  if (w[1] != c / a.groups) {
    shape_fail(op, in, "expected w.shape[1] = C/groups = " + std::to_string(c / a.groups));
  }
  check_bias(op, in, o);
  const int64_t oh = conv_out_size(x[x.size() - 2], w[2], a.stride_h, a.pad_h, a.dilation_h);
  const int64_t ow = conv_out_size(x[x.size() - 1], w[3], a.stride_w, a.pad_w, a.dilation_w);
  if (oh < 1 || ow < 1) shape_fail(op, in, "expected the dilated kernel to fit the padded input");
  Shape out = leading(x);
  out.insert(out.end(), {o, oh, ow});
  return {out, in[0].dtype};
}

// conv_transpose2d's output length along one axis (PyTorch's formula).
int64_t transpose_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
}

TensorType infer_conv_transpose2d(const Attrs& attrs, std::span<const TensorType> in) {
  const char* op = "conv_transpose2d";
  const auto& t = attrs.as<ConvTranspose2dAttrs>();
  const Conv2dAttrs& a = t.conv;
  if (in.size() != 2 && in.size() != 3) shape_fail(op, in, "expected inputs (x, w[, bias])");
  check_float_operands(op, in);
  check_conv_attrs(op, a, in);
  // PyTorch's rule: each output padding is smaller than its stride or its dilation.
  if (t.output_padding_h < 0 || t.output_padding_w < 0 ||
      (t.output_padding_h >= a.stride_h && t.output_padding_h >= a.dilation_h) ||
      (t.output_padding_w >= a.stride_w && t.output_padding_w >= a.dilation_w)) {
    shape_fail(op, in,
               "expected 0 <= output_padding < stride or < dilation, got " + Attrs(t).str());
  }
  check_image(op, in, 0, "x");
  if (in[1].rank() != 4) shape_fail(op, in, "expected w of shape [C, O/groups, kh, kw]");
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  const int64_t c = x[x.size() - 3];
  if (w[0] != c) shape_fail(op, in, "expected w.shape[0] = C = " + std::to_string(c));
  const int64_t o = w[1] * a.groups;
  check_groups(op, in, c, o, a.groups);
  check_bias(op, in, o);
  const int64_t oh = transpose_out_size(x[x.size() - 2], w[2], a.stride_h, a.pad_h, a.dilation_h,
                                        t.output_padding_h);
  const int64_t ow = transpose_out_size(x[x.size() - 1], w[3], a.stride_w, a.pad_w, a.dilation_w,
                                        t.output_padding_w);
  if (oh < 1 || ow < 1) shape_fail(op, in, "expected a positive output size");
  Shape out = leading(x);
  out.insert(out.end(), {o, oh, ow});
  return {out, in[0].dtype};
}

TensorType infer_backward_input(const Attrs& attrs, std::span<const TensorType> in) {
  const char* op = "conv2d_backward_input";
  const auto& b = attrs.as<Conv2dBackwardInputAttrs>();
  const Conv2dAttrs& a = b.conv;
  check_float_operands(op, in);
  check_conv_attrs(op, a, in);
  check_image(op, in, 0, "gy");
  if (in[1].rank() != 4) shape_fail(op, in, "expected w of shape [O, C/groups, kh, kw]");
  const Shape& gy = in[0].shape;
  const Shape& w = in[1].shape;
  const int64_t o = gy[gy.size() - 3];
  if (w[0] != o) shape_fail(op, in, "expected w.shape[0] = gy's channels");
  check_groups(op, in, w[1] * a.groups, o, a.groups);
  if (b.in_h < 1 || b.in_w < 1 ||
      conv_out_size(b.in_h, w[2], a.stride_h, a.pad_h, a.dilation_h) < gy[gy.size() - 2] ||
      conv_out_size(b.in_w, w[3], a.stride_w, a.pad_w, a.dilation_w) < gy[gy.size() - 1]) {
    shape_fail(
        op, in,
        "expected an input size (" + Attrs(b).str() + ") whose convolution output covers gy");
  }
  Shape out = leading(gy);
  out.insert(out.end(), {w[1] * a.groups, b.in_h, b.in_w});
  return {out, in[0].dtype};
}

TensorType infer_backward_weight(const Attrs& attrs, std::span<const TensorType> in) {
  const char* op = "conv2d_backward_weight";
  const auto& b = attrs.as<Conv2dBackwardWeightAttrs>();
  const Conv2dAttrs& a = b.conv;
  check_float_operands(op, in);
  check_conv_attrs(op, a, in);
  check_image(op, in, 0, "x");
  check_image(op, in, 1, "gy");
  const Shape& x = in[0].shape;
  const Shape& gy = in[1].shape;
  if (leading(x) != leading(gy)) shape_fail(op, in, "expected x and gy with equal batch axes");
  const int64_t c = x[x.size() - 3], o = gy[gy.size() - 3];
  check_groups(op, in, c, o, a.groups);
  if (b.kernel_h < 1 || b.kernel_w < 1 ||
      conv_out_size(x[x.size() - 2], b.kernel_h, a.stride_h, a.pad_h, a.dilation_h) <
          gy[gy.size() - 2] ||
      conv_out_size(x[x.size() - 1], b.kernel_w, a.stride_w, a.pad_w, a.dilation_w) <
          gy[gy.size() - 1]) {
    shape_fail(
        op, in,
        "expected a kernel size (" + Attrs(b).str() + ") whose convolution output covers gy");
  }
  return {Shape{o, c / a.groups, b.kernel_h, b.kernel_w}, in[0].dtype};
}

// ---- evaluation ----

// Geometry from the forward input shape, the weight's kernel size and the output shape.
ConvGeom make_geom(const Conv2dAttrs& a, const Shape& x, const Shape& y, int64_t k_h, int64_t k_w) {
  const size_t r = x.size();
  return ConvGeom{a,        leading_numel(x), x[r - 3], x[r - 2], x[r - 1],
                  y[r - 3], y[r - 2],         y[r - 1], k_h,      k_w};
}

Array eval_conv2d(const Node& n, std::span<const Array* const> in) {
  const Array& x = *in[0];
  const Array& w = *in[1];
  Array y(n.type.shape, n.type.dtype);
  ConvGeom g = make_geom(n.attrs.as<Conv2dAttrs>(), x.shape, y.shape, w.shape[2], w.shape[3]);
  conv_forward(g, x.data.data(), w.data.data(), in.size() == 3 ? in[2]->data.data() : nullptr,
               y.data.data());
  return y;
}

Array eval_conv_transpose2d(const Node& n, std::span<const Array* const> in) {
  const Array& x = *in[0];
  const Array& w = *in[1];
  Array y(n.type.shape, n.type.dtype);
  // The output plays the forward convolution's input, x its output.
  ConvGeom g =
      make_geom(n.attrs.as<ConvTranspose2dAttrs>().conv, y.shape, x.shape, w.shape[2], w.shape[3]);
  conv_backward_input(g, x.data.data(), w.data.data(), y.data.data());
  if (in.size() == 3) {
    const int64_t plane = g.in_h * g.in_w;
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t c = 0; c < g.c_in; ++c) {
        double* p = y.data.data() + (b * g.c_in + c) * plane;
        for (int64_t i = 0; i < plane; ++i) p[i] += in[2]->data[static_cast<size_t>(c)];
      }
    }
  }
  return y;
}

Array eval_backward_input(const Node& n, std::span<const Array* const> in) {
  const Array& gy = *in[0];
  const Array& w = *in[1];
  Array dx(n.type.shape, n.type.dtype);
  ConvGeom g = make_geom(n.attrs.as<Conv2dBackwardInputAttrs>().conv, dx.shape, gy.shape,
                         w.shape[2], w.shape[3]);
  conv_backward_input(g, gy.data.data(), w.data.data(), dx.data.data());
  return dx;
}

Array eval_backward_weight(const Node& n, std::span<const Array* const> in) {
  const Array& x = *in[0];
  const Array& gy = *in[1];
  const auto& b = n.attrs.as<Conv2dBackwardWeightAttrs>();
  Array dw(n.type.shape, n.type.dtype);
  ConvGeom g = make_geom(b.conv, x.shape, gy.shape, b.kernel_h, b.kernel_w);
  conv_backward_weight(g, x.data.data(), gy.data.data(), dw.data.data());
  return dw;
}

// ---- backward rules ----

Tensor conv2d_with(Tensor x, Tensor w, const Conv2dAttrs& a) {
  return x.graph().apply("conv2d", a, {x, w});
}

// A convolution of a larger input can produce more rows/columns than the gradient it stands for
// (conv_transpose2d with output_padding >= stride): those extra positions were never outputs.
Tensor crop_to(Tensor t, int64_t h, int64_t w) {
  if (t.dim(-2) > h) t = slice(t, -2, 0, h);
  if (t.dim(-1) > w) t = slice(t, -1, 0, w);
  return t;
}

// d/d bias of a per-channel bias: the cotangent summed over everything but the channel axis.
Tensor bias_grad(Tensor cot) {
  std::vector<int64_t> axes;
  for (int i = 0; i < cot.rank(); ++i) {
    if (i != cot.rank() - 3) axes.push_back(i);
  }
  return sum(cot, axes);
}

std::vector<Tensor> vjp_conv2d(const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
  const auto& a = n.attrs.as<Conv2dAttrs>();
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  std::vector<Tensor> g{conv2d_backward_input(cot, w, a, x.dim(-2), x.dim(-1)),
                        conv2d_backward_weight(x, cot, a, w.dim(2), w.dim(3))};
  if (in.size() == 3) g.push_back(bias_grad(cot));
  return g;
}

std::vector<Tensor> vjp_conv_transpose2d(const Node& n, std::span<const Tensor> in, Tensor,
                                         Tensor cot) {
  const Conv2dAttrs& a = n.attrs.as<ConvTranspose2dAttrs>().conv;
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  std::vector<Tensor> g{crop_to(conv2d_with(cot, w, a), x.dim(-2), x.dim(-1)),
                        conv2d_backward_weight(cot, x, a, w.dim(2), w.dim(3))};
  if (in.size() == 3) g.push_back(bias_grad(cot));
  return g;
}

std::vector<Tensor> vjp_backward_input(const Node& n, std::span<const Tensor> in, Tensor,
                                       Tensor cot) {
  const Conv2dAttrs& a = n.attrs.as<Conv2dBackwardInputAttrs>().conv;
  const Tensor& gy = in[0];
  const Tensor& w = in[1];
  return {crop_to(conv2d_with(cot, w, a), gy.dim(-2), gy.dim(-1)),
          conv2d_backward_weight(cot, gy, a, w.dim(2), w.dim(3))};
}

std::vector<Tensor> vjp_backward_weight(const Node& n, std::span<const Tensor> in, Tensor,
                                        Tensor cot) {
  const Conv2dAttrs& a = n.attrs.as<Conv2dBackwardWeightAttrs>().conv;
  const Tensor& x = in[0];
  const Tensor& gy = in[1];
  return {conv2d_backward_input(gy, cot, a, x.dim(-2), x.dim(-1)),
          crop_to(conv2d_with(x, cot, a), gy.dim(-2), gy.dim(-1))};
}

// ---- samples ----

Conv2dAttrs conv_attrs(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                       int64_t groups) {
  return {sh, sw, ph, pw, dh, dw, groups};
}

OpSample sample(std::string label, std::vector<Shape> shapes, Attrs attrs) {
  OpSample s{std::move(label), {}, std::move(attrs)};
  for (Shape& sh : shapes) {
    s.inputs.push_back({std::move(sh), DType::f32});
    s.ranges.emplace_back(-1.0, 1.0);
  }
  return s;
}

std::vector<OpSample> conv2d_samples() {
  return {
      sample("basic_bias", {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, conv_attrs(1, 1, 0, 0, 1, 1, 1)),
      sample("stride2_pad1_nobias", {{1, 2, 7, 6}, {3, 2, 3, 3}}, conv_attrs(2, 2, 1, 1, 1, 1, 1)),
      sample("dilation2_pad2", {{1, 2, 7, 7}, {2, 2, 3, 3}, {2}}, conv_attrs(1, 1, 2, 2, 2, 2, 1)),
      sample("groups2_rect", {{2, 4, 5, 4}, {6, 2, 3, 2}, {6}}, conv_attrs(2, 1, 1, 0, 1, 1, 2)),
      sample("depthwise", {{1, 4, 6, 6}, {4, 1, 3, 3}}, conv_attrs(1, 1, 1, 1, 1, 1, 4)),
      sample("unbatched", {{3, 5, 5}, {2, 3, 2, 2}, {2}}, conv_attrs(1, 1, 0, 0, 1, 1, 1)),
      sample("pointwise_1x1", {{2, 4, 3, 3}, {5, 4, 1, 1}}, conv_attrs(1, 1, 0, 0, 1, 1, 1)),
      sample("two_batch_axes", {{2, 1, 2, 4, 4}, {3, 2, 3, 3}}, conv_attrs(1, 1, 1, 1, 1, 1, 1)),
      // Stride larger than the kernel leaves input rows and columns unread (zero gradient).
      sample("stride3_gaps_odd", {{1, 1, 8, 7}, {1, 1, 2, 2}, {1}},
             conv_attrs(3, 3, 0, 0, 1, 1, 1)),
  };
}

std::vector<OpSample> conv_transpose2d_samples() {
  auto t = [](Conv2dAttrs a, int64_t oph, int64_t opw) {
    return ConvTranspose2dAttrs{a, oph, opw};
  };
  return {
      sample("stride2_pad1_outpad1", {{1, 3, 4, 4}, {3, 2, 3, 3}, {2}},
             t(conv_attrs(2, 2, 1, 1, 1, 1, 1), 1, 1)),
      sample("groups2", {{2, 4, 3, 3}, {4, 3, 2, 2}, {6}},
             t(conv_attrs(2, 2, 0, 0, 1, 1, 2), 0, 0)),
      // output_padding >= stride (allowed because < dilation): the backward crops.
      sample("dilation2_outpad_ge_stride", {{1, 2, 4, 4}, {2, 2, 3, 3}},
             t(conv_attrs(1, 1, 1, 1, 2, 2, 1), 1, 1)),
      sample("unbatched_nobias", {{2, 3, 3}, {2, 3, 2, 2}},
             t(conv_attrs(1, 1, 0, 0, 1, 1, 1), 0, 0)),
      sample("rect_stride_outpad", {{1, 2, 3, 4}, {2, 2, 3, 2}, {2}},
             t(conv_attrs(3, 2, 1, 0, 1, 1, 1), 2, 1)),
  };
}

std::vector<OpSample> backward_input_samples() {
  auto b = [](Conv2dAttrs a, int64_t h, int64_t w) { return Conv2dBackwardInputAttrs{a, h, w}; };
  return {
      sample("basic", {{2, 4, 3, 3}, {4, 3, 3, 3}}, b(conv_attrs(1, 1, 0, 0, 1, 1, 1), 5, 5)),
      sample("stride2_pad1", {{1, 3, 4, 3}, {3, 2, 3, 3}},
             b(conv_attrs(2, 2, 1, 1, 1, 1, 1), 7, 6)),
      sample("groups2_dilation", {{2, 4, 5, 3}, {4, 1, 2, 2}},
             b(conv_attrs(1, 1, 1, 0, 2, 1, 2), 5, 4)),
      // gy smaller than the convolution output of in_h x in_w (as conv_transpose2d makes it).
      sample("gy_smaller", {{1, 2, 4, 4}, {2, 2, 3, 3}}, b(conv_attrs(1, 1, 1, 1, 2, 2, 1), 7, 7)),
  };
}

std::vector<OpSample> backward_weight_samples() {
  auto b = [](Conv2dAttrs a, int64_t h, int64_t w) { return Conv2dBackwardWeightAttrs{a, h, w}; };
  return {
      sample("basic", {{2, 3, 5, 5}, {2, 4, 3, 3}}, b(conv_attrs(1, 1, 0, 0, 1, 1, 1), 3, 3)),
      sample("stride2_pad1", {{1, 2, 7, 6}, {1, 3, 4, 3}},
             b(conv_attrs(2, 2, 1, 1, 1, 1, 1), 3, 3)),
      sample("groups2_dilation", {{2, 4, 5, 4}, {2, 4, 5, 3}},
             b(conv_attrs(1, 1, 1, 0, 2, 1, 2), 2, 2)),
      sample("gy_smaller", {{1, 2, 7, 7}, {1, 2, 4, 4}}, b(conv_attrs(1, 1, 1, 1, 2, 2, 1), 3, 3)),
  };
}

Conv2dAttrs to_attrs(const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
                     const std::array<int64_t, 2>& dilation, int64_t groups) {
  return {stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], groups};
}

std::vector<Tensor> operands(Tensor x, Tensor w, Tensor bias) {
  std::vector<Tensor> v{x, w};
  if (bias.valid()) v.push_back(bias);
  return v;
}

}  // namespace

Tensor conv2d(Tensor x, Tensor w, Tensor bias, Conv2dOptions opt) {
  return x.graph().apply("conv2d", to_attrs(opt.stride, opt.padding, opt.dilation, opt.groups),
                         operands(x, w, bias));
}

Tensor conv1d(Tensor x, Tensor w, Tensor bias, Conv1dOptions opt) {
  // Checked in 1-D terms, so that a bad call is not reported in the shapes of the views.
  std::vector<TensorType> in{x.type(), w.type()};
  if (bias.valid()) in.push_back(bias.type());
  const char* op = "conv1d";
  if (opt.stride < 1 || opt.dilation < 1 || opt.groups < 1 || opt.padding < 0) {
    shape_fail(op, in,
               "expected stride, dilation, groups >= 1 and padding >= 0, got stride " +
                   std::to_string(opt.stride) + ", padding " + std::to_string(opt.padding) +
                   ", dilation " + std::to_string(opt.dilation) + ", groups " +
                   std::to_string(opt.groups));
  }
  if (x.rank() < 2) shape_fail(op, in, "expected x of shape [..., C, L]");
  if (w.rank() != 3) shape_fail(op, in, "expected w of shape [O, C/groups, k]");
  const int64_t c = x.dim(x.rank() - 2), length = x.dim(x.rank() - 1);
  check_groups(op, in, c, w.dim(0), opt.groups);
  if (w.dim(1) != c / opt.groups) {
    shape_fail(op, in, "expected w.shape[1] = C/groups = " + std::to_string(c / opt.groups));
  }
  check_bias(op, in, w.dim(0));
  if (conv_out_size(length, w.dim(2), opt.stride, opt.padding, opt.dilation) < 1) {
    shape_fail(op, in, "expected the dilated kernel to fit the padded input");
  }
  Shape x4 = x.shape();
  x4.insert(x4.end() - 1, 1);
  Conv2dOptions o;
  o.stride = {1, opt.stride};
  o.padding = {0, opt.padding};
  o.dilation = {1, opt.dilation};
  o.groups = opt.groups;
  Tensor y = conv2d(reshape(x, x4), reshape(w, {w.dim(0), w.dim(1), 1, w.dim(2)}), bias, o);
  Shape out = y.shape();
  out.erase(out.end() - 2);
  return reshape(y, out);
}

Tensor conv_transpose2d(Tensor x, Tensor w, Tensor bias, ConvTranspose2dOptions opt) {
  ConvTranspose2dAttrs a{to_attrs(opt.stride, opt.padding, opt.dilation, opt.groups),
                         opt.output_padding[0], opt.output_padding[1]};
  return x.graph().apply("conv_transpose2d", a, operands(x, w, bias));
}

Tensor conv2d_backward_input(Tensor gy, Tensor w, const Conv2dAttrs& a, int64_t in_h,
                             int64_t in_w) {
  return gy.graph().apply("conv2d_backward_input", Conv2dBackwardInputAttrs{a, in_h, in_w},
                          {gy, w});
}

Tensor conv2d_backward_weight(Tensor x, Tensor gy, const Conv2dAttrs& a, int64_t kernel_h,
                              int64_t kernel_w) {
  return x.graph().apply("conv2d_backward_weight", Conv2dBackwardWeightAttrs{a, kernel_h, kernel_w},
                         {x, gy});
}

void register_conv_ops(OpRegistry& r) {
  r.add({.name = "conv2d",
         .arity = -1,
         .archetype = Archetype::conv,
         .infer = infer_conv2d,
         .eval = eval_conv2d,
         .vjp = vjp_conv2d,
         .samples = conv2d_samples,
         .summary = "2-D convolution of [..., C, H, W] (stride, padding, dilation, groups, bias)"});
  r.add({.name = "conv_transpose2d",
         .arity = -1,
         .archetype = Archetype::conv,
         .infer = infer_conv_transpose2d,
         .eval = eval_conv_transpose2d,
         .vjp = vjp_conv_transpose2d,
         .samples = conv_transpose2d_samples,
         .summary = "2-D transposed convolution, weight [C, O/groups, kh, kw] as PyTorch"});
  r.add({.name = "conv2d_backward_input",
         .arity = 2,
         .archetype = Archetype::conv,
         .infer = infer_backward_input,
         .eval = eval_backward_input,
         .vjp = vjp_backward_input,
         .samples = backward_input_samples,
         .summary = "conv2d's input gradient from (gy, w): the adjoint of conv2d in x",
         .internal = true});
  r.add({.name = "conv2d_backward_weight",
         .arity = 2,
         .archetype = Archetype::conv,
         .infer = infer_backward_weight,
         .eval = eval_backward_weight,
         .vjp = vjp_backward_weight,
         .samples = backward_weight_samples,
         .summary = "conv2d's weight gradient from (x, gy), summed over batch and positions",
         .internal = true});
}

}  // namespace mn
