// Resize and Upsample. Where the resampling is one of PyTorch's 2-D ones (nearest with
// asymmetric coordinates and floor rounding; linear with half-pixel or align-corners
// coordinates) it is the upsample op; otherwise each resized axis is resampled separately as a
// weighted sum of gathers whose source indices and weights are computed here, which covers every
// coordinate transformation, nearest rounding, linear and cubic interpolation on any axis.
#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

struct ResizeSpec {
  std::string mode, coords, rounding;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  std::vector<double> scales;   // per axis (output / input)
  std::vector<int64_t> sizes;   // per axis
  std::vector<double> roi;      // tf_crop_and_resize: starts then ends, per axis
  double extrapolation = 0.0;
};

ResizeSpec resize_spec(NodeContext& c, const Shape& in) {
  ResizeSpec r;
  const bool upsample = c.node().op_type() == "Upsample";
  r.mode = c.attr_string("mode", "nearest");
  r.coords = upsample || c.opset() < 11 ? "asymmetric"
                                        : c.attr_string("coordinate_transformation_mode", "half_pixel");
  r.rounding = upsample || c.opset() < 11 ? "floor" : c.attr_string("nearest_mode", "round_prefer_floor");
  r.cubic_a = c.attr_float("cubic_coeff_a", -0.75);
  r.exclude_outside = c.attr_int("exclude_outside", 0) != 0;
  r.extrapolation = c.attr_float("extrapolation_value", 0.0);
  if (upsample && c.opset() < 9) {
    for (float f : c.attr_floats("scales")) r.scales.push_back(f);
  } else {
    const size_t scales_input = upsample || c.opset() < 11 ? 1 : 2;
    if (c.has(scales_input) && mn::numel(c.shape(scales_input)) > 0) {
      r.scales = c.known(scales_input, "scales").data;
    }
    if (!upsample && c.opset() >= 11 && c.has(3) && mn::numel(c.shape(3)) > 0) {
      r.sizes = c.known_ints(3, "sizes");
    }
    if (!upsample && c.opset() >= 11 && c.has(1) && mn::numel(c.shape(1)) > 0) {
      r.roi = c.known(1, "roi").data;
    }
  }
  const size_t rank = in.size();
  // Opset 18: scales or sizes for the listed axes only; the others keep their size.
  if (auto axes = c.attr_ints_opt("axes")) {
    std::vector<double> scales(rank, 1.0);
    std::vector<int64_t> sizes(in.begin(), in.end());
    const bool by_size = !r.sizes.empty();
    if ((by_size ? r.sizes.size() : r.scales.size()) != axes->size()) c.fail("scales or sizes must match 'axes'");
    for (size_t i = 0; i < axes->size(); ++i) {
      const size_t a = static_cast<size_t>(c.axis((*axes)[i], static_cast<int>(rank)));
      if (by_size) sizes[a] = r.sizes[i];
      else scales[a] = r.scales[i];
    }
    if (by_size) r.sizes = sizes;
    else r.scales = scales;
  }
  if (c.attr_int("antialias", 0) != 0) c.unsupported("antialias = 1");
  if (c.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch") {
    c.unsupported("keep_aspect_ratio_policy other than 'stretch'");
  }
  if (!r.sizes.empty()) {
    if (r.sizes.size() != rank) c.fail("sizes must give one size per axis");
    r.scales.clear();
    for (size_t a = 0; a < rank; ++a) {
      r.scales.push_back(static_cast<double>(r.sizes[a]) / static_cast<double>(in[a]));
    }
  } else {
    if (r.scales.size() != rank) c.fail("scales must give one factor per axis");
    for (size_t a = 0; a < rank; ++a) {
      if (!(r.scales[a] > 0)) c.fail("scales must be positive");
      r.sizes.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in[a]) * r.scales[a])));
    }
  }
  for (int64_t s : r.sizes) {
    if (s <= 0) c.unsupported("an output axis of size 0");
  }
  if (r.mode != "nearest" && r.mode != "linear" && r.mode != "bilinear" && r.mode != "cubic") {
    c.fail("unknown mode '" + r.mode + "'");
  }
  if (r.coords == "tf_crop_and_resize" && r.roi.size() != 2 * rank) {
    c.fail("tf_crop_and_resize needs a roi of 2 values per axis");
  }
  return r;
}

// The source coordinate of output position x along axis `a`.
double source_coordinate(const ResizeSpec& r, size_t a, double x, int64_t in_len) {
  // ONNX measures the output in units of the scale: in_len * scale, not the rounded size.
  const double scale = r.scales[a];
  const double n = static_cast<double>(in_len);
  const double out_len = n * scale;
  if (r.coords == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (r.coords == "pytorch_half_pixel") return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (r.coords == "align_corners") return out_len == 1 ? 0.0 : x * (n - 1) / (out_len - 1);
  if (r.coords == "asymmetric") return x / scale;
  if (r.coords == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  // tf_crop_and_resize
  const size_t rank = r.roi.size() / 2;
  const double start = r.roi[a], end = r.roi[a + rank];
  return out_len > 1 ? start * (n - 1) + x * (end - start) * (n - 1) / (out_len - 1)
                     : 0.5 * (start + end) * (n - 1);
}

int64_t nearest_index(const std::string& rounding, double x) {
  if (rounding == "floor") return static_cast<int64_t>(std::floor(x));
  if (rounding == "ceil") return static_cast<int64_t>(std::ceil(x));
  const double f = std::floor(x);
  if (x - f == 0.5) return static_cast<int64_t>(rounding == "round_prefer_ceil" ? f + 1 : f);
  return static_cast<int64_t>(std::round(x));
}

double cubic_weight(double d, double a) {
  d = std::abs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0.0;
}

// The taps of one axis: taps[k][i] is the k-th source index of output i, with its weight
// (an index of -1 stands for the extrapolation value of tf_crop_and_resize).
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
};

Taps axis_taps(NodeContext& c, const ResizeSpec& r, size_t a, int64_t in_len) {
  const int64_t out_len = r.sizes[a];
  c.host_limit(out_len, "Resize's source indices");
  const bool nearest = r.mode == "nearest";
  const bool cubic = r.mode == "cubic";
  const int taps = nearest ? 1 : cubic ? 4 : 2;
  Taps t;
  t.index.assign(static_cast<size_t>(taps), std::vector<int64_t>(static_cast<size_t>(out_len)));
  t.weight.assign(static_cast<size_t>(taps), std::vector<double>(static_cast<size_t>(out_len)));
  auto clampi = [&](int64_t i) { return std::min(std::max<int64_t>(i, 0), in_len - 1); };
  for (int64_t o = 0; o < out_len; ++o) {
    const double x = source_coordinate(r, a, static_cast<double>(o), in_len);
    const size_t oi = static_cast<size_t>(o);
    const bool outside = r.coords == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in_len - 1));
    if (outside) {
      for (int k = 0; k < taps; ++k) {
        t.index[k][oi] = -1;
        t.weight[k][oi] = k == 0 ? 1.0 : 0.0;
      }
      continue;
    }
    if (nearest) {
      t.index[0][oi] = clampi(nearest_index(r.rounding, x));
      t.weight[0][oi] = 1.0;
      continue;
    }
    const double f = std::floor(x);
    const double frac = x - f;
    const int64_t base = static_cast<int64_t>(f);
    double total = 0;
    for (int k = 0; k < taps; ++k) {
      const int64_t i = cubic ? base - 1 + k : base + k;
      double w = cubic ? cubic_weight(frac - (k - 1), r.cubic_a) : (k == 0 ? 1.0 - frac : frac);
      if (r.exclude_outside && (i < 0 || i >= in_len)) w = 0.0;
      t.index[k][oi] = clampi(i);
      t.weight[k][oi] = w;
      total += w;
    }
    if (r.exclude_outside && total != 0.0) {
      for (int k = 0; k < taps; ++k) t.weight[k][oi] /= total;
    }
  }
  (void)c;
  return t;
}

// x resampled along axis a: sum over taps of take(x, index) * weight.
Tensor resample_axis(NodeContext& c, Tensor x, int a, const Taps& t, double extrapolation) {
  Graph& g = c.graph();
  const int64_t out_len = static_cast<int64_t>(t.index[0].size());
  Shape wshape(static_cast<size_t>(x.rank()), 1);
  wshape[static_cast<size_t>(a)] = out_len;
  Tensor sum;
  bool any_outside = false;
  for (size_t k = 0; k < t.index.size(); ++k) {
    Array idx({out_len}, DType::i32), w(wshape, x.dtype());
    for (int64_t o = 0; o < out_len; ++o) {
      const int64_t i = t.index[k][static_cast<size_t>(o)];
      any_outside = any_outside || i < 0;
      idx.data[static_cast<size_t>(o)] = static_cast<double>(std::max<int64_t>(i, 0));
      w.data[static_cast<size_t>(o)] = i < 0 ? 0.0 : t.weight[k][static_cast<size_t>(o)];
    }
    Tensor term = take(x, g.constant(std::move(idx)), a) * g.constant(std::move(w));
    sum = sum.valid() ? sum + term : term;
  }
  if (any_outside && extrapolation != 0.0) {
    Array mask(wshape, x.dtype());
    for (int64_t o = 0; o < out_len; ++o) mask.data[static_cast<size_t>(o)] = t.index[0][static_cast<size_t>(o)] < 0;
    sum = sum + g.constant(std::move(mask)) * extrapolation;
  }
  return sum;
}

// PyTorch's resamplings as ops: 4-D, only H and W resized.
bool upsample_op(const ResizeSpec& r, const Tensor& x, Tensor* y) {
  if (x.rank() != 4 || r.scales[0] != 1.0 || r.scales[1] != 1.0) return false;
  const bool whole = static_cast<double>(x.dim(2)) * r.scales[2] == static_cast<double>(r.sizes[2]) &&
                     static_cast<double>(x.dim(3)) * r.scales[3] == static_cast<double>(r.sizes[3]);
  if (r.mode == "nearest" && r.coords == "asymmetric" && r.rounding == "floor" && whole) {
    *y = upsample_nearest2d(x, r.sizes[2], r.sizes[3]);
    return true;
  }
  if (r.mode == "linear" || r.mode == "bilinear") {
    const bool half = (r.coords == "half_pixel" || r.coords == "pytorch_half_pixel") && whole &&
                      r.sizes[2] > 1 && r.sizes[3] > 1;
    if (half || (r.coords == "align_corners" && whole)) {
      *y = upsample_bilinear2d(x, r.sizes[2], r.sizes[3], r.coords == "align_corners");
      return true;
    }
  }
  return false;
}

void convert_resize(NodeContext& c) {
  Tensor x = c.in(0);
  if (!is_float(x.dtype())) c.unsupported("resizing integers");
  const ResizeSpec r = resize_spec(c, x.shape());
  Tensor y;
  if (upsample_op(r, x, &y)) {
    c.out(0, y, c.type(0));
    return;
  }
  y = x;
  for (int a = 0; a < x.rank(); ++a) {
    if (r.sizes[static_cast<size_t>(a)] == x.dim(a) && r.coords != "tf_crop_and_resize" &&
        r.scales[static_cast<size_t>(a)] == 1.0) {
      continue;  // an axis left alone maps every index to itself
    }
    y = resample_axis(c, y, a, axis_taps(c, r, static_cast<size_t>(a), x.dim(a)), r.extrapolation);
  }
  c.out(0, y, c.type(0));
}

}  // namespace

void add_resize_converters(ConverterTable& t) {
  t.add("Resize", convert_resize);
  t.add("Upsample", convert_resize);
}

}  // namespace mn::onnx
