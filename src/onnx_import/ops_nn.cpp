// ONNX network ops: convolutions, pooling, normalizations, Gemm/MatMul, softmax, Resize, losses.
// 1-D convolutions and pools run as 2-D ones over a unit height; 3-D ones are not supported.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

// Window geometry of a Conv/ConvTranspose/pool node over the spatial axes of `x` (1 or 2 of
// them), with auto_pad resolved into explicit begin/end pads.
struct Window {
  int dims = 2;  // spatial axes of the node (1 or 2)
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, dilation{1, 1}, begin{0, 0}, end{0, 0};
  bool symmetric() const { return begin == end; }
};

int spatial_dims(NodeContext& c, const Tensor& x) {
  if (!is_float(x.dtype()) || c.type(0) == ElemType::boolean) {
    c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)) + " (float types only)");
  }
  const int d = x.rank() - 2;
  if (d == 3) c.unsupported("3-D inputs (1-D and 2-D are supported)");
  if (d < 1 || d > 2) c.fail("input must be [N, C, spatial...] with 1 or 2 spatial axes");
  return d;
}

// Reads one attribute list per spatial axis, defaulting to `fallback`; 1-D values go to the
// width, the unit height added taking `unit` (1 for sizes and steps, 0 for paddings).
std::array<int64_t, 2> per_axis(NodeContext& c, const char* name, int dims, int64_t fallback,
                                int64_t unit = 1) {
  std::vector<int64_t> v = c.attr_ints(name);
  if (v.empty()) v.assign(static_cast<size_t>(dims), fallback);
  if (static_cast<int>(v.size()) != dims) {
    c.fail(std::string("'") + name + "' needs " + std::to_string(dims) + " values");
  }
  return dims == 1 ? std::array<int64_t, 2>{unit, v[0]} : std::array<int64_t, 2>{v[0], v[1]};
}

// same_pads: resolve SAME_UPPER/SAME_LOWER as a convolution's (ConvTranspose resolves them
// from its output shape itself).
Window window_of(NodeContext& c, const Tensor& x, std::array<int64_t, 2> kernel,
                 bool same_pads = true) {
  Window w;
  w.dims = spatial_dims(c, x);
  w.kernel = kernel;
  w.stride = per_axis(c, "strides", w.dims, 1);
  w.dilation = per_axis(c, "dilations", w.dims, 1);
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> pads = c.attr_ints("pads");
    if (pads.empty()) pads.assign(static_cast<size_t>(2 * w.dims), 0);
    if (static_cast<int>(pads.size()) != 2 * w.dims) c.fail("'pads' needs 2 values per spatial axis");
    for (int i = 0; i < w.dims; ++i) {
      const int a = w.dims == 1 ? 1 : i;
      w.begin[a] = pads[i];
      w.end[a] = pads[i + w.dims];
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int a = 2 - w.dims; same_pads && a < 2; ++a) {
      const int64_t in = x.dim(x.rank() - 2 + a);
      const int64_t out = (in + w.stride[a] - 1) / w.stride[a];
      const int64_t span = (w.kernel[a] - 1) * w.dilation[a] + 1;
      const int64_t total = std::max<int64_t>((out - 1) * w.stride[a] + span - in, 0);
      w.begin[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.end[a] = total - w.begin[a];
    }
  } else if (auto_pad != "VALID") {
    c.fail("unknown auto_pad '" + auto_pad + "'");
  }
  for (int a = 0; a < 2; ++a) {
    if (w.begin[a] < 0 || w.end[a] < 0) c.fail("negative pads");
  }
  return w;
}

// [N, C, L] -> [N, C, 1, L] for 1-D nodes.
Tensor as_2d(const Window& w, Tensor x) {
  if (w.dims == 2) return x;
  Shape s = x.shape();
  s.insert(s.end() - 1, 1);
  return reshape(x, s);
}
Tensor from_2d(const Window& w, Tensor y) { return w.dims == 2 ? y : squeeze(y, {2}); }

// Pads the two spatial axes of a 4-D tensor by (begin, end) with `value`.
Tensor pad_spatial(Tensor x, const Window& w, double value) {
  return pad(x, {{0, 0}, {0, 0}, {w.begin[0], w.end[0]}, {w.begin[1], w.end[1]}}, value);
}

void convert_conv(NodeContext& c) {
  Tensor x = c.in(0);
  Tensor wt = c.in(1);
  if (wt.rank() != x.rank()) c.fail("W must have the rank of X");
  const int dims = spatial_dims(c, x);
  const std::array<int64_t, 2> k = dims == 1 ? std::array<int64_t, 2>{1, wt.dim(2)}
                                              : std::array<int64_t, 2>{wt.dim(2), wt.dim(3)};
  const Window w = window_of(c, x, k);
  Conv2dOptions o;
  o.stride = w.stride;
  o.dilation = w.dilation;
  o.groups = c.attr_int("group", 1);
  Tensor x2 = as_2d(w, x);
  if (w.symmetric()) {
    o.padding = w.begin;
  } else {
    x2 = pad_spatial(x2, w, 0.0);
  }
  Tensor bias = c.has(2) ? c.in(2) : Tensor{};
  c.out(0, from_2d(w, conv2d(x2, as_2d(w, wt), bias, o)), c.type(0));
}

void convert_conv_transpose(NodeContext& c) {
  Tensor x = c.in(0);
  Tensor wt = c.in(1);
  const int dims = spatial_dims(c, x);
  const std::array<int64_t, 2> k = dims == 1 ? std::array<int64_t, 2>{1, wt.dim(2)}
                                              : std::array<int64_t, 2>{wt.dim(2), wt.dim(3)};
  auto output_shape = c.attr_ints("output_shape");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  Window w = window_of(c, x, k, /*same_pads=*/false);
  const std::array<int64_t, 2> out_pad = per_axis(c, "output_padding", dims, 0, 0);
  if (output_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
    for (int a = 2 - dims; a < 2; ++a) output_shape.push_back(x.dim(x.rank() - 2 + a) * w.stride[a]);
  }
  if (!output_shape.empty()) {
    if (static_cast<int>(output_shape.size()) != dims) c.fail("'output_shape' needs one value per spatial axis");
    for (int a = 2 - dims; a < 2; ++a) {
      const int64_t in = x.dim(x.rank() - 2 + a);
      const int64_t want = output_shape[static_cast<size_t>(a - (2 - dims))];
      const int64_t full = w.stride[a] * (in - 1) + out_pad[a] + (k[a] - 1) * w.dilation[a] + 1;
      // ONNX's rule with floor division: a negative total extends the end.
      const int64_t total = full - want;
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      w.begin[a] = auto_pad == "SAME_UPPER" ? half : total - half;
      w.end[a] = total - w.begin[a];
    }
  }
  ConvTranspose2dOptions o;
  o.stride = w.stride;
  o.dilation = w.dilation;
  o.groups = c.attr_int("group", 1);
  Tensor bias = c.has(2) ? c.in(2) : Tensor{};
  Tensor x2 = as_2d(w, x);
  Tensor w2 = as_2d(w, wt);
  const bool direct = w.symmetric() && out_pad[0] < std::max(w.stride[0], w.dilation[0]) &&
                      out_pad[1] < std::max(w.stride[1], w.dilation[1]);
  if (direct) {
    o.padding = w.begin;
    o.output_padding = out_pad;
    c.out(0, from_2d(w, conv_transpose2d(x2, w2, bias, o)), c.type(0));
    return;
  }
  // The full result, extended by output_padding (and negative pads), cropped by the positive
  // pads, then the bias.
  Tensor y = conv_transpose2d(x2, w2, {}, o);
  auto neg = [](int64_t p) { return std::max<int64_t>(-p, 0); };
  const std::vector<std::pair<int64_t, int64_t>> extend{
      {0, 0}, {0, 0}, {neg(w.begin[0]), out_pad[0] + neg(w.end[0])},
      {neg(w.begin[1]), out_pad[1] + neg(w.end[1])}};
  if (extend[2] != std::pair<int64_t, int64_t>{0, 0} || extend[3] != std::pair<int64_t, int64_t>{0, 0}) {
    y = pad(y, extend);
  }
  for (int a = 0; a < 2; ++a) {
    const int axis = 2 + a;
    const int64_t b = std::max<int64_t>(w.begin[a], 0), e = std::max<int64_t>(w.end[a], 0);
    if (b > 0 || e > 0) y = slice(y, axis, b, y.dim(axis) - e);
  }
  if (bias.valid()) y = y + reshape(bias, {bias.dim(0), 1, 1});
  c.out(0, from_2d(w, y), c.type(0));
}

Pool2dOptions pool_options(NodeContext& c, const Window& w) {
  Pool2dOptions o;
  o.kernel = w.kernel;
  o.stride = w.stride;
  o.dilation = w.dilation;
  o.ceil_mode = c.attr_int("ceil_mode", 0) != 0;
  return o;
}

// Explicit padding where the pool's own (symmetric, at most half a window) cannot express it.
bool pads_fit_pool(const Window& w) {
  return w.symmetric() && w.begin[0] * 2 <= w.kernel[0] && w.begin[1] * 2 <= w.kernel[1];
}

// MaxUnpool: the values written at their MaxPool indices (flat over the whole unpooled tensor of
// (in - 1) · stride + kernel - pads per axis) into zeros; an output_shape input larger than that
// pads each axis at its end.
void convert_max_unpool(NodeContext& c) {
  Tensor x = c.in(0);
  if (!is_integer(c.type(1))) c.fail("indices must be integers");
  if (c.shape(1) != c.shape(0)) c.fail("indices must have the input's shape");
  const int spatial = static_cast<int>(x.rank()) - 2;
  if (spatial < 1) c.fail("input must be [N, C, ...]");
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape");
  if (static_cast<int>(kernel.size()) != spatial) c.fail("'kernel_shape' needs one value per spatial axis");
  std::vector<int64_t> strides = c.attr_ints("strides"), pads = c.attr_ints("pads");
  if (strides.empty()) strides.assign(static_cast<size_t>(spatial), 1);
  if (pads.empty()) pads.assign(static_cast<size_t>(2 * spatial), 0);
  if (static_cast<int>(strides.size()) != spatial || static_cast<int>(pads.size()) != 2 * spatial) {
    c.fail("'strides' and 'pads' need one and two values per spatial axis");
  }
  Shape unpooled = {x.dim(0), x.dim(1)};
  constexpr int64_t kMost = int64_t{1} << 31;  // elements a device index reaches
  for (int a = 0; a < spatial; ++a) {
    const auto i = static_cast<size_t>(a);
    const int64_t k = kernel[i], st = strides[i], p0 = pads[i], p1 = pads[i + static_cast<size_t>(spatial)];
    if (k < 1 || st < 1 || p0 < 0 || p1 < 0 || k > kMost || st > kMost || p0 > kMost || p1 > kMost) {
      c.fail("kernel_shape and strides must be positive and pads not negative (and below 2^31)");
    }
    unpooled.push_back((x.dim(2 + a) - 1) * st + k - p0 - p1);
  }
  int64_t total = 1;
  for (int64_t d : unpooled) {
    if (d <= 0) c.fail("the unpooled shape " + shape_str(unpooled) + " has an empty axis");
    if (d > kMost || total > kMost / d) c.fail("the unpooled shape " + shape_str(unpooled) + " is too large");
    total *= d;
  }
  Tensor zeros = broadcast_to(c.scalar(0.0, x), {numel(unpooled)});
  Tensor y = reshape(scatter_add(zeros, reshape(c.in(1), {x.numel()}), reshape(x, {x.numel()}), 0),
                     unpooled);
  if (c.has(2)) {
    const std::vector<int64_t> shape = c.known_ints(2, "output_shape");
    if (shape.size() != unpooled.size()) c.fail("output_shape must have the input's rank");
    std::vector<std::pair<int64_t, int64_t>> grow;
    int64_t total_out = 1;
    for (size_t a = 0; a < shape.size(); ++a) {
      if (shape[a] > kMost || (shape[a] > 0 && total_out > kMost / shape[a])) {
        c.fail("output_shape is too large");
      }
      total_out *= std::max<int64_t>(shape[a], 1);
      if (shape[a] < unpooled[a] || (a < 2 && shape[a] != unpooled[a])) {
        c.fail("output_shape " + shape_str(Shape(shape.begin(), shape.end())) +
               " must keep N and C and cover the unpooled shape " + shape_str(unpooled));
      }
      grow.emplace_back(0, shape[a] - unpooled[a]);
    }
    y = pad(y, grow);
  }
  c.out(0, y, c.type(0));
}

// MaxPool's Indices output: every window's elements gathered ([N, C, K, OH·OW], padding and
// positions past the input as -inf), the first maximum's slot, and its position, flat over the
// whole input (row-major, or column-major within each plane for storage_order 1).
Tensor max_pool_indices(NodeContext& c, Tensor x, const Window& w, const Shape& y_shape) {
  const int64_t storage = c.attr_int("storage_order", 0);
  if (storage != 0 && storage != 1) c.fail("storage_order must be 0 or 1");
  const int64_t h = x.rank() == 4 ? x.dim(2) : 1, wd = x.dim(x.rank() - 1);
  const int64_t oh = y_shape.size() == 4 ? y_shape[2] : 1, ow = y_shape.back();
  const int64_t taps = w.kernel[0] * w.kernel[1], outs = oh * ow;
  c.host_limit(taps * outs, "the window index table");
  if (x.numel() >= (int64_t{1} << 24)) c.unsupported("Indices of inputs of 2^24 elements or more");
  // Per tap and output: the element read (clamped), whether it is inside, and its position.
  Array read({taps, outs}, DType::i32), inside({1, 1, taps, outs}, DType::f32);
  Array position({1, 1, taps, outs}, DType::f32);
  for (int64_t ky = 0; ky < w.kernel[0]; ++ky) {
    for (int64_t kx = 0; kx < w.kernel[1]; ++kx) {
      const int64_t k = ky * w.kernel[1] + kx;
      for (int64_t r = 0; r < oh; ++r) {
        for (int64_t q = 0; q < ow; ++q) {
          const int64_t iy = r * w.stride[0] - w.begin[0] + ky * w.dilation[0];
          const int64_t ix = q * w.stride[1] - w.begin[1] + kx * w.dilation[1];
          const bool in = iy >= 0 && iy < h && ix >= 0 && ix < wd;
          const auto at = static_cast<size_t>(k * outs + r * ow + q);
          read.data[at] = in ? static_cast<double>(iy * wd + ix) : 0.0;
          inside.data[at] = in ? 1.0 : 0.0;
          position.data[at] = static_cast<double>(storage == 0 ? iy * wd + ix : ix * h + iy);
        }
      }
    }
  }
  const int64_t n = x.dim(0), channels = x.dim(1);
  Tensor planes = reshape(cast(x, DType::f32), {n, channels, h * wd});
  Tensor windows = take(planes, c.graph().constant(std::move(read)), 2);  // [N, C, K, OH·OW]
  Tensor in = c.graph().constant(std::move(inside));
  windows = where(in, windows, c.scalar(-std::numeric_limits<double>::infinity(), windows));
  Tensor first = one_hot(argmax(windows, 2), taps);                       // [N, C, OH·OW, K]
  Tensor chosen = sum(first * permute(c.graph().constant(std::move(position)), {0, 1, 3, 2}), {3});
  Array plane({n, channels, 1}, DType::f32);
  for (int64_t i = 0; i < n * channels; ++i) plane.data[static_cast<size_t>(i)] = static_cast<double>(i * h * wd);
  return reshape(chosen + c.graph().constant(std::move(plane)), y_shape);
}

void convert_max_pool(NodeContext& c) {
  Tensor x = c.in(0);
  const int dims = spatial_dims(c, x);
  Window w = window_of(c, x, per_axis(c, "kernel_shape", dims, 0));
  if (w.kernel[0] <= 0 || w.kernel[1] <= 0) c.fail("'kernel_shape' is missing");
  Pool2dOptions o = pool_options(c, w);
  Tensor x2 = as_2d(w, x);
  if (pads_fit_pool(w)) {
    o.padding = w.begin;
  } else {
    x2 = pad_spatial(x2, w, -std::numeric_limits<double>::infinity());
  }
  Tensor y = from_2d(w, max_pool2d(x2, o));
  c.out(0, y, c.type(0));
  if (c.wants(1)) c.out(1, cast(max_pool_indices(c, x, w, y.shape()), DType::i32), ElemType::i64);
}

void convert_average_pool(NodeContext& c) {
  Tensor x = c.in(0);
  const int dims = spatial_dims(c, x);
  Window w = window_of(c, x, per_axis(c, "kernel_shape", dims, 0));
  if (w.kernel[0] <= 0 || w.kernel[1] <= 0) c.fail("'kernel_shape' is missing");
  if (w.dilation != std::array<int64_t, 2>{1, 1}) c.unsupported("dilated average pooling");
  Pool2dOptions o = pool_options(c, w);
  o.count_include_pad = c.attr_int("count_include_pad", 0) != 0;
  Tensor x2 = as_2d(w, x);
  if (pads_fit_pool(w)) {
    o.padding = w.begin;
    c.out(0, from_2d(w, avg_pool2d(x2, o)), c.type(0));
    return;
  }
  Tensor sum = avg_pool2d(pad_spatial(x2, w, 0.0), o);
  if (!o.count_include_pad) {
    // The padding counted out: divide by the share of each window that is input.
    Shape s = x2.shape();
    s[0] = 1;
    s[1] = 1;
    Tensor ones = broadcast_to(c.graph().scalar(1.0, x2.dtype()), s);
    sum = sum / avg_pool2d(pad_spatial(ones, w, 0.0), o);
  }
  c.out(0, from_2d(w, sum), c.type(0));
}

std::vector<int64_t> spatial_axes(const Tensor& x) {
  std::vector<int64_t> axes;
  for (int a = 2; a < x.rank(); ++a) axes.push_back(a);
  return axes;
}

void convert_global_average_pool(NodeContext& c) {
  Tensor x = c.in(0);
  c.out(0, mean(x, spatial_axes(x), true), c.type(0));
}

void convert_global_max_pool(NodeContext& c) {
  Tensor x = c.in(0);
  c.out(0, max(x, spatial_axes(x), true), c.type(0));
}

// BatchNormalization with training_mode = 1 (opset 14 on): normalized by the batch's mean and
// (biased) variance, and the running statistics as ONNX updates them: input · momentum + batch
// statistic · (1 - momentum), the variance biased too (unlike PyTorch's).
void convert_batch_norm_training(NodeContext& c) {
  Tensor x = c.in(0);
  if (x.rank() < 2) c.fail("input must be [N, C, ...]");
  const double eps = c.attr_float("epsilon", 1e-5);
  const double momentum = c.attr_float("momentum", 0.9);
  std::vector<int64_t> axes{0};
  for (int64_t a = 2; a < x.rank(); ++a) axes.push_back(a);
  Shape per_channel(static_cast<size_t>(x.rank()), 1);
  per_channel[1] = x.dim(1);
  Tensor batch_mean = mean(x, axes);
  Tensor batch_var = variance(x, axes);
  auto channels = [&](Tensor v) { return reshape(v, per_channel); };
  Tensor y = (x - channels(batch_mean)) * rsqrt(channels(batch_var) + eps) * channels(c.in(1)) +
             channels(c.in(2));
  c.out(0, y, c.type(0));
  if (c.wants(1)) c.out(1, c.in(3) * momentum + batch_mean * (1.0 - momentum), c.type(3));
  if (c.wants(2)) c.out(2, c.in(4) * momentum + batch_var * (1.0 - momentum), c.type(4));
}

void convert_batch_norm(NodeContext& c) {
  if (c.attr_int("training_mode", 0) != 0) {
    convert_batch_norm_training(c);
    return;
  }
  if (c.opset() < 9 && c.attr_int("spatial", 1) == 0) c.unsupported("spatial = 0");
  for (size_t i = 1; i < c.output_count(); ++i) {
    if (c.wants(i)) c.unsupported("the running statistics outputs (training)");
  }
  const double eps = c.attr_float("epsilon", 1e-5);
  Tensor x = c.in(0);
  auto r = batch_norm(x, c.in(1), c.in(2), c.in(3), c.in(4), false, 0.1, eps);
  c.out(0, r.y, c.type(0));
}

void convert_instance_norm(NodeContext& c) {
  Tensor x = c.in(0);
  const double eps = c.attr_float("epsilon", 1e-5);
  c.out(0, group_norm(x, x.dim(1), c.in(1), c.in(2), eps), c.type(0));
}

// GroupNormalization: scale and bias per group in opset 18, per channel from opset 21.
void convert_group_norm(NodeContext& c) {
  Tensor x = c.in(0);
  if (x.rank() < 3) c.fail("input must be [N, C, ...]");
  const int64_t groups = c.attr_int("num_groups", 0);
  const int64_t channels = x.dim(1);
  if (groups <= 0 || channels % groups != 0) c.fail("num_groups must divide the channels");
  auto per_channel = [&](size_t i) {
    Tensor p = c.in(i);
    if (p.numel() == channels) return reshape(p, {channels});
    if (p.numel() != groups) c.fail("scale and bias must hold one value per group or per channel");
    return reshape(broadcast_to(reshape(p, {groups, 1}), {groups, channels / groups}), {channels});
  };
  c.out(0, group_norm(x, groups, per_channel(1), per_channel(2), c.attr_float("epsilon", 1e-5)), c.type(0));
}

void convert_layer_norm(NodeContext& c) {
  Tensor x = c.in(0);
  const int axis = c.axis(c.attr_int("axis", -1), x.rank());
  const double eps = c.attr_float("epsilon", 1e-5);
  const Shape trailing(x.shape().begin() + axis, x.shape().end());
  auto param = [&](size_t i) {
    if (!c.has(i)) return Tensor{};
    Tensor p = c.in(i);
    return p.shape() == trailing ? p : broadcast_to(p, trailing);
  };
  const int64_t dims = x.rank() - axis;
  c.out(0, layer_norm(x, param(1), param(2), dims, eps), c.type(0));
  if (c.wants(1) || c.wants(2)) {
    std::vector<int64_t> axes;
    for (int a = axis; a < x.rank(); ++a) axes.push_back(a);
    Tensor xf = cast(x, DType::f32);
    c.out(1, mean(xf, axes, true), ElemType::f32);
    c.out(2, rsqrt(variance(xf, axes, true) + eps), ElemType::f32);
  }
}

// LRN: x / (bias + alpha / size * sum of x^2 over the channel window)^beta, the window
// [c - floor((size-1)/2), c + ceil((size-1)/2)] summed as shifted slices of the padded squares.
void convert_lrn(NodeContext& c) {
  Tensor x = c.in(0);
  if (x.rank() < 3) c.fail("input must be [N, C, ...]");
  const int64_t size = c.attr_int("size", 0);
  if (size <= 0) c.fail("'size' must be positive");
  const double alpha = c.attr_float("alpha", 1e-4), beta = c.attr_float("beta", 0.75),
               bias = c.attr_float("bias", 1.0);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<std::pair<int64_t, int64_t>> p(static_cast<size_t>(x.rank()), {0, 0});
  p[1] = {before, after};
  Tensor sq = pad(x * x, p);
  const int64_t channels = x.dim(1);
  Tensor window;
  for (int64_t k = 0; k < size; ++k) {
    Tensor s = slice(sq, 1, k, k + channels);
    window = window.valid() ? window + s : s;
  }
  c.out(0, x / pow(bias + (alpha / static_cast<double>(size)) * window, c.scalar(beta, x)), c.type(0));
}

// MeanVarianceNormalization: (x - mean) / (sqrt(mean((x - mean)^2)) + 1e-9) over `axes`.
void convert_mvn(NodeContext& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = c.attr_ints_opt("axes").value_or(std::vector<int64_t>{0, 2, 3});
  for (auto& a : axes) a = c.axis(a, x.rank());
  Tensor centered = x - mean(x, axes, true);
  c.out(0, centered / (sqrt(mean(centered * centered, axes, true)) + 1e-9), c.type(0));
}

// TopK for a known, small k: k rounds of (max, argmax), each masking the element it took.
void convert_topk(NodeContext& c) {
  Tensor x = c.in_float(0);
  const int64_t k = static_cast<int64_t>(c.known_scalar(1, "K"));
  const int axis = c.axis(c.attr_int("axis", -1), x.rank());
  if (k < 1 || k > x.dim(axis)) c.fail("K must be in [1, " + std::to_string(x.dim(axis)) + "]");
  if (k > 16) c.unsupported("K above 16 (it is unrolled into K rounds)");
  if (c.attr_int("sorted", 1) == 0) c.unsupported("sorted = 0");
  const bool largest = c.attr_int("largest", 1) != 0;
  // Each element's position along the axis, to mask the one each round takes.
  const int64_t n = x.dim(axis);
  c.host_limit(n, "TopK's positions");
  Array position_values({n}, DType::i32);
  for (int64_t j = 0; j < n; ++j) position_values.data[static_cast<size_t>(j)] = static_cast<double>(j);
  Shape along(static_cast<size_t>(x.rank()), 1);
  along[static_cast<size_t>(axis)] = n;
  Tensor positions = reshape(c.graph().constant(std::move(position_values)), along);
  Tensor work = largest ? x : neg(x);
  const double lowest = -3.0e38;  // below any finite f32 value a round could take
  std::vector<Tensor> values, indices;
  for (int64_t i = 0; i < k; ++i) {
    Tensor id = argmax(work, axis, true);
    values.push_back(max(work, {axis}, true));
    indices.push_back(id);
    work = where(eq(positions, id), c.scalar(lowest, work), work);
  }
  Tensor v = values.size() == 1 ? values[0] : concat(values, axis);
  c.out(0, largest ? v : neg(v), c.type(0));
  c.out(1, indices.size() == 1 ? indices[0] : concat(indices, axis), ElemType::i64);
}

void convert_gemm(NodeContext& c) {
  Tensor a = c.in(0);
  Tensor b = c.in(1);
  if (a.rank() != 2 || b.rank() != 2) c.fail("A and B must be 2-D");
  const double alpha = c.attr_float("alpha", 1.0);
  const double beta = c.attr_float("beta", 1.0);
  Tensor y = matmul(a, b, c.attr_int("transA", 0) != 0, c.attr_int("transB", 0) != 0);
  if (alpha != 1.0) y = y * alpha;
  if (c.has(2) && beta != 0.0) {
    Tensor bias = c.in(2);
    y = y + (beta == 1.0 ? bias : bias * beta);
  }
  c.out(0, y, c.type(0));
}

void convert_matmul(NodeContext& c) {
  if (!is_float(graph_dtype_of(c.type(0), c.where())) || c.type(0) == ElemType::boolean) {
    c.unsupported("integer products");
  }
  c.out(0, matmul(c.in(0), c.in(1)), c.type(0));
}

// Softmax-like ops: opset 13 works along one axis; earlier ones flatten to [outer, inner] at
// `axis` (default 1) and normalize the inner part.
template <typename F>
void along_axis(NodeContext& c, F f) {
  Tensor x = c.in(0);
  if (c.opset() >= 13) {
    c.out(0, f(x, c.axis(c.attr_int("axis", -1), x.rank())), c.type(0));
    return;
  }
  const int axis = c.axis(c.attr_int("axis", 1), x.rank());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(i);
  c.out(0, reshape(f(reshape(x, {outer, inner}), 1), x.shape()), c.type(0));
}

Tensor hardmax(Tensor x, int axis) {
  Tensor idx = argmax(x, axis, false);
  return last_axis_to(one_hot(idx, x.dim(axis), x.dtype()), axis);
}

// The losses over class indices. Without per-class weights they are the cross_entropy and
// nll_loss ops; with them, NLL is composed: -w[t] * logp[t] per element (0 where ignored),
// summed, or divided by the sum of the weights taken.
struct LossSpec {
  Reduction reduction = Reduction::mean;
  std::optional<int64_t> ignore_index;
};

LossSpec loss_spec(NodeContext& c) {
  LossSpec l;
  const std::string r = c.attr_string("reduction", "mean");
  if (r == "mean") l.reduction = Reduction::mean;
  else if (r == "sum") l.reduction = Reduction::sum;
  else if (r == "none") l.reduction = Reduction::none;
  else c.fail("unknown reduction '" + r + "'");
  l.ignore_index = c.attr_int("ignore_index");
  return l;
}

Tensor weighted_nll(NodeContext& c, Tensor logp, Tensor target, Tensor weight, const LossSpec& l) {
  Graph& g = c.graph();
  if (target.dtype() != DType::i32) target = cast(target, DType::i32);
  const int64_t classes = logp.dim(1);
  Tensor valid = l.ignore_index ? ne(target, g.scalar(static_cast<double>(*l.ignore_index), DType::i32))
                                : broadcast_to(g.scalar(1.0), target.shape());
  Tensor safe = where(valid, target, g.scalar(0, DType::i32));
  std::vector<int64_t> perm{0};
  for (int a = 2; a < logp.rank(); ++a) perm.push_back(a);
  perm.push_back(1);
  Tensor picked = sum(permute(logp, perm) * one_hot(safe, classes, logp.dtype()), {-1});
  Tensor w = (weight.valid() ? take(weight, safe, 0) : broadcast_to(g.scalar(1.0, logp.dtype()), target.shape())) *
             cast(valid, logp.dtype());
  Tensor loss = neg(picked) * w;
  if (l.reduction == Reduction::none) return loss;
  if (l.reduction == Reduction::sum) return sum(loss);
  return sum(loss) / sum(w);
}

Tensor class_loss(NodeContext& c, Tensor logp_or_logits, bool from_logits) {
  const LossSpec l = loss_spec(c);
  Tensor target = c.in(1);
  if (c.has(2) || (l.ignore_index && *l.ignore_index < 0)) {
    Tensor logp = from_logits ? log_softmax(logp_or_logits, 1) : logp_or_logits;
    return weighted_nll(c, logp, target, c.has(2) ? c.in(2) : Tensor{}, l);
  }
  // Without ignore_index every index counts: the most negative i32 is never a class.
  const int64_t ignore = l.ignore_index.value_or(std::numeric_limits<int32_t>::min());
  if (from_logits) return cross_entropy(logp_or_logits, target, {l.reduction, ignore, 0.0});
  return nll_loss(logp_or_logits, target, l.reduction, ignore);
}

void convert_softmax_cross_entropy(NodeContext& c) {
  Tensor logits = c.in(0);
  c.out(0, class_loss(c, logits, true), c.type(0));
  if (c.wants(1)) c.out(1, log_softmax(logits, 1), c.type(0));
}

void convert_nll_loss(NodeContext& c) { c.out(0, class_loss(c, c.in(0), false), c.type(0)); }

}  // namespace

void add_nn_converters(ConverterTable& t) {
  t.add("Conv", convert_conv);
  t.add("ConvTranspose", convert_conv_transpose);
  t.add("MaxPool", convert_max_pool);
  t.add("MaxUnpool", convert_max_unpool);
  t.add("AveragePool", convert_average_pool);
  t.add("GlobalAveragePool", convert_global_average_pool);
  t.add("GlobalMaxPool", convert_global_max_pool);
  t.add("BatchNormalization", convert_batch_norm);
  t.add("InstanceNormalization", convert_instance_norm);
  t.add("LayerNormalization", convert_layer_norm);
  t.add("GroupNormalization", convert_group_norm);
  t.add("Gemm", convert_gemm);
  t.add("LRN", convert_lrn);
  t.add("MeanVarianceNormalization", convert_mvn);
  t.add("TopK", convert_topk);
  t.add("MatMul", convert_matmul);
  t.add("Softmax", [](NodeContext& c) { along_axis(c, [](Tensor x, int a) { return softmax(x, a); }); });
  t.add("LogSoftmax", [](NodeContext& c) { along_axis(c, [](Tensor x, int a) { return log_softmax(x, a); }); });
  t.add("Hardmax", [](NodeContext& c) { along_axis(c, hardmax); });
  t.add("SoftmaxCrossEntropyLoss", convert_softmax_cross_entropy);
  t.add("NegativeLogLikelihoodLoss", convert_nll_loss);
}

}  // namespace mn::onnx
