// GridSample (2-D, as PyTorch's grid_sample): the grid's normalized coordinates unnormalized,
// padded (border: clamped; reflection: reflected, then clamped), and the input read at integer
// taps by one take each over the flattened input, weighted per output element: bilinear (4
// taps), nearest (rounded half to even) or bicubic (16 taps, A = -0.75, the padding applied to
// each tap). Taps outside the input read zero.
#include <onnx/onnx_pb.h>

#include <array>
#include <cmath>
#include <optional>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

enum class Padding { zeros, border, reflection };

struct Sampler {
  NodeContext& c;
  Tensor flat;   // the input flattened
  Tensor base;   // [N, C, 1, 1]: the offset of each (n, c) plane
  int64_t h = 0, w = 0;
  Padding padding = Padding::zeros;
  bool align = false;

  Tensor k(double v, const Tensor& like) { return c.scalar(v, like); }

  // floor for |x| < 2^23 (coordinates): through a cast to i32, then one step down where it
  // rounded up (negative x).
  Tensor floor(Tensor x) {
    Tensor t = cast(cast(x, DType::i32), DType::f32);
    return t - lt(x, t);
  }

  Tensor unnormalize(Tensor g, int64_t size) {
    const auto s = static_cast<double>(size);
    return align ? (g + 1.0) * ((s - 1.0) / 2.0) : ((g + 1.0) * s - 1.0) / 2.0;
  }

  // PyTorch's reflect_coordinates over [twice_low / 2, twice_high / 2].
  Tensor reflect(Tensor x, double twice_low, double twice_high) {
    if (twice_low == twice_high) return x * 0.0;
    const double low = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
    Tensor in = abs(x - low);
    Tensor flips = floor(in / span);
    Tensor extra = in - flips * span;
    Tensor even = eq(flips - 2.0 * floor(flips / 2.0), k(0.0, flips));
    return where(even, extra + low, (span - extra) + low);
  }

  // The padding applied to a coordinate along an axis of `size`.
  Tensor padded(Tensor x, int64_t size) {
    const auto s = static_cast<double>(size);
    if (padding == Padding::border) return clamp(x, 0.0, s - 1.0);
    if (padding == Padding::reflection) {
      Tensor r = align ? reflect(x, 0.0, 2.0 * (s - 1.0)) : reflect(x, -1.0, 2.0 * s - 1.0);
      return clamp(r, 0.0, s - 1.0);
    }
    return x;
  }

  // The input at integer taps (y, x) of [N, 1, Ho, Wo], zero outside: [N, C, Ho, Wo].
  Tensor at(Tensor y, Tensor x) {
    Tensor inside = ge(x, k(0.0, x)) * le(x, k(static_cast<double>(w - 1), x)) *
                    ge(y, k(0.0, y)) * le(y, k(static_cast<double>(h - 1), y));
    Tensor offset = base + clamp(y, 0.0, static_cast<double>(h - 1)) * static_cast<double>(w) +
                    clamp(x, 0.0, static_cast<double>(w - 1));
    return take(flat, cast(offset, DType::i32), 0) * inside;
  }

  Tensor bilinear(Tensor iy, Tensor ix) {
    Tensor x0 = floor(ix), y0 = floor(iy);
    Tensor tx = ix - x0, ty = iy - y0;
    Tensor x1 = x0 + 1.0, y1 = y0 + 1.0;
    return at(y0, x0) * ((1.0 - tx) * (1.0 - ty)) + at(y0, x1) * (tx * (1.0 - ty)) +
           at(y1, x0) * ((1.0 - tx) * ty) + at(y1, x1) * (tx * ty);
  }

  // Round half to even, as nearbyint.
  Tensor round_even(Tensor x) {
    Tensor f = floor(x);
    Tensor d = x - f;
    Tensor odd = f - 2.0 * floor(f / 2.0);
    return f + gt(d, k(0.5, d)) + eq(d, k(0.5, d)) * odd;
  }

  // The four cubic convolution weights of a fraction t (A = -0.75).
  std::array<Tensor, 4> cubic_weights(Tensor t) {
    const double a = -0.75;
    auto near = [&](Tensor x) { return ((x * (a + 2.0) - (a + 3.0)) * x) * x + 1.0; };
    auto far = [&](Tensor x) { return ((x * a - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a; };
    return {far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)};
  }

  Tensor bicubic(Tensor iy, Tensor ix) {
    Tensor x0 = floor(ix), y0 = floor(iy);
    const std::array<Tensor, 4> wx = cubic_weights(ix - x0), wy = cubic_weights(iy - y0);
    std::optional<Tensor> sum;
    for (int j = 0; j < 4; ++j) {
      Tensor y = padded(y0 + static_cast<double>(j - 1), h);
      std::optional<Tensor> row;
      for (int i = 0; i < 4; ++i) {
        Tensor term = at(y, padded(x0 + static_cast<double>(i - 1), w)) * wx[static_cast<size_t>(i)];
        row = row ? *row + term : term;
      }
      Tensor weighted = *row * wy[static_cast<size_t>(j)];
      sum = sum ? *sum + weighted : weighted;
    }
    return *sum;
  }
};

void convert_grid_sample(NodeContext& c) {
  Tensor x = c.in(0), grid = c.in(1);
  if (!is_float_type(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  if (x.rank() != 4) c.unsupported(std::to_string(x.rank()) + "-D inputs (2-D sampling only)");
  const int64_t n = x.dim(0), channels = x.dim(1);
  if (grid.rank() != 4 || grid.dim(0) != n || grid.dim(3) != 2) c.fail("grid must be [N, H_out, W_out, 2]");
  const std::string mode = c.attr_string("mode", c.opset() >= 20 ? "linear" : "bilinear");
  const std::string pad = c.attr_string("padding_mode", "zeros");
  Sampler s{c, {}, {}, x.dim(2), x.dim(3)};
  s.align = c.attr_int("align_corners", 0) != 0;
  if (pad == "zeros") s.padding = Padding::zeros;
  else if (pad == "border") s.padding = Padding::border;
  else if (pad == "reflection") s.padding = Padding::reflection;
  else c.fail("padding_mode '" + pad + "' (zeros, border or reflection)");
  c.host_limit(n * channels, "the plane offsets");
  if (x.numel() >= (int64_t{1} << 24)) c.unsupported("inputs of 2^24 elements or more");
  Tensor xf = cast(x, DType::f32);
  s.flat = reshape(xf, {x.numel()});
  Array base({n, channels, 1, 1}, DType::f32);
  for (int64_t i = 0; i < n * channels; ++i) {
    base.data[static_cast<size_t>(i)] = static_cast<double>(i * s.h * s.w);
  }
  s.base = c.graph().constant(std::move(base));
  const int64_t ho = grid.dim(1), wo = grid.dim(2);
  Tensor g = cast(grid, DType::f32);
  Tensor gx = reshape(slice(g, 3, 0, 1), {n, 1, ho, wo});
  Tensor gy = reshape(slice(g, 3, 1, 2), {n, 1, ho, wo});
  Tensor ix = s.unnormalize(gx, s.w), iy = s.unnormalize(gy, s.h);
  Tensor y;
  if (mode == "bilinear" || mode == "linear") {
    y = s.bilinear(s.padded(iy, s.h), s.padded(ix, s.w));
  } else if (mode == "nearest") {
    y = s.at(s.round_even(s.padded(iy, s.h)), s.round_even(s.padded(ix, s.w)));
  } else if (mode == "bicubic" || mode == "cubic") {
    y = s.bicubic(iy, ix);
  } else {
    c.fail("mode '" + mode + "'");
  }
  c.out(0, cast(y, x.dtype()), c.type(0));
}

}  // namespace

void add_grid_sample_converter(ConverterTable& t) { t.add("GridSample", convert_grid_sample); }

}  // namespace mn::onnx
