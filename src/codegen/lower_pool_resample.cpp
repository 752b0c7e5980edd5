// Resampling ops (adaptive_avg_pool2d, upsample_nearest2d, upsample_bilinear2d) and their
// backward ops. Each op is separable: per axis, output index o reads input taps c with weight
// wt(o, c). The per-axis GLSL functions of an op, for axis a ("h" or "w"):
//   void taps_a(int o, out int lo, out int hi)  candidate taps [lo, hi) of output o
//   bool tap_a(int o, int c, out float wt)      whether c is a tap of o, and its weight
//   int first_a(int c), int last_a(int c)       candidate outputs [first, last] reading c
// The forward kernel sums over taps; the backward kernel is the same map transposed as a gather
// (each input-gradient element sums over the outputs that read it): no atomics, deterministic.
#include <cmath>
#include <functional>

#include "codegen/glsl.h"
#include "codegen/lower_pool.h"
#include "ir/ops/pool.h"

namespace mn::codegen::pool {

namespace {

// Sizes along one axis of the forward op: `in` read, `out` written.
struct Axis {
  const char* name;
  int64_t in, out;
};

std::string flit(double v) { return glsl::float_literal(v); }

// PyTorch's adaptive bins [floor(o·in/out), ceil((o+1)·in/out)).
std::string adaptive_axis(const Axis& x) {
  const std::string a = x.name, in = ilit(x.in), out = ilit(x.out);
  std::string s = "void taps_" + a + "(int o, out int lo, out int hi) { lo = (o * " + in + ") / " +
                  out + "; hi = ((o + 1) * " + in + " + " + ilit(x.out - 1) + ") / " + out +
                  "; }\n";
  s += "bool tap_" + a + "(int o, int c, out float wt) { int lo, hi; taps_" + a +
       "(o, lo, hi); wt = 1.0 / float(hi - lo); return c >= lo && c < hi; }\n";
  s += "int first_" + a + "(int c) { return (c * " + out + ") / " + in + "; }\n";
  s += "int last_" + a + "(int c) { return min(" + ilit(x.out - 1) + ", ((c + 1) * " + out + " + " +
       ilit(x.in - 1) + ") / " + in + "); }\n";
  return s;
}

// nearest_source_index in GLSL: the same shortcuts, and floor(dst · (in/out)) in float32 with
// the scale rounded to float32 first, as PyTorch computes it.
std::string nearest_axis(const Axis& x) {
  const std::string a = x.name;
  std::string s = "int src_" + a + "(int o) { ";
  if (x.out == x.in) {
    s += "return o; }\n";
  } else if (x.out == 2 * x.in) {
    s += "return o >> 1; }\n";
  } else {
    const float scale = static_cast<float>(x.in) / static_cast<float>(x.out);
    s += "precise float t = float(o) * " + flit(scale) + "; return min(int(floor(t)), " +
         ilit(x.in - 1) + "); }\n";
  }
  s += "void taps_" + a + "(int o, out int lo, out int hi) { lo = src_" + a +
       "(o); hi = lo + 1; }\n";
  s += "bool tap_" + a + "(int o, int c, out float wt) { wt = 1.0; return src_" + a +
       "(o) == c; }\n";
  // A margin of one output each side absorbs the float rounding of the scale.
  s += "int first_" + a + "(int c) { return max(0, (c * " + ilit(x.out) + ") / " + ilit(x.in) +
       " - 1); }\n";
  s += "int last_" + a + "(int c) { return min(" + ilit(x.out - 1) + ", ((c + 1) * " + ilit(x.out) +
       " + " + ilit(x.in - 1) + ") / " + ilit(x.in) + " + 1); }\n";
  return s;
}

// PyTorch's linear source index (area_pixel_compute_source_index) with its neighbor and lambda
// rules: taps i0 and i1 = min(i0 + 1, in - 1) with weights 1 - l1 and l1.
std::string bilinear_axis(const Axis& x, bool align_corners) {
  const std::string a = x.name;
  const double scale =
      align_corners
          ? (x.out > 1 ? static_cast<double>(x.in - 1) / static_cast<double>(x.out - 1) : 0.0)
          : static_cast<double>(x.in) / static_cast<double>(x.out);
  std::string s = "void lin_" + a + "(int o, out int i0, out int i1, out float l1) {\n";
  s += align_corners ? "  float src = " + flit(scale) + " * float(o);\n"
                     : "  float src = " + flit(scale) + " * (float(o) + 0.5) - 0.5;\n";
  s += "  src = max(src, 0.0);\n";
  s += "  i0 = int(src); i1 = i0 + (i0 < " + ilit(x.in - 1) + " ? 1 : 0);\n";
  s += "  l1 = clamp(src - float(i0), 0.0, 1.0);\n}\n";
  s += "void taps_" + a + "(int o, out int lo, out int hi) { int i1; float l1; lin_" + a +
       "(o, lo, i1, l1); hi = i1 + 1; }\n";
  s += "bool tap_" + a + "(int o, int c, out float wt) { int i0, i1; float l1; lin_" + a +
       "(o, i0, i1, l1);\n";
  s += "  wt = (c == i0 ? 1.0 - l1 : 0.0) + (c == i1 ? l1 : 0.0); return c == i0 || c == i1; }\n";
  // Outputs whose i0 is c - 1 or c, i.e. whose source lies in [c - 1, c + 1), widened by one
  // output each side against rounding.
  const std::string last = ilit(x.out - 1);
  if (scale == 0.0) {
    s += "int first_" + a + "(int c) { return 0; }\n";
    s += "int last_" + a + "(int c) { return " + last + "; }\n";
  } else if (align_corners) {
    const std::string inv = flit(static_cast<double>(x.out - 1) / static_cast<double>(x.in - 1));
    s += "int first_" + a + "(int c) { return max(0, int(floor((float(c) - 1.0) * " + inv +
         ")) - 1); }\n";
    s += "int last_" + a + "(int c) { return min(" + last + ", int(ceil((float(c) + 1.0) * " + inv +
         ")) + 1); }\n";
  } else {
    const std::string inv = flit(static_cast<double>(x.out) / static_cast<double>(x.in));
    s += "int first_" + a + "(int c) { return max(0, int(floor((float(c) - 0.5) * " + inv +
         " - 0.5)) - 1); }\n";
    s += "int last_" + a + "(int c) { return min(" + last + ", int(ceil((float(c) + 1.5) * " + inv +
         " - 0.5)) + 1); }\n";
  }
  return s;
}

using AxisFn = std::function<std::string(const Axis&, bool align_corners)>;

Lowering forward_kernel(const LowerContext& ctx, const AxisFn& axis) {
  const Planes g = planes_of(ctx);
  const bool ac = ctx.node.attrs.as<Resample2dAttrs>().align_corners;
  const std::string functions = axis({"h", g.in_h, g.out_h}, ac) + axis({"w", g.in_w, g.out_w}, ac);
  std::string body = "  uint base = p * " + ulit(g.in_h * g.in_w) + ";\n";
  body += "  int h0, h1, w0, w1; taps_h(oy, h0, h1); taps_w(ox, w0, w1);\n";
  body += "  float acc = 0.0;\n";
  body += "  for (int y = h0; y < h1; ++y) {\n";
  body += "    float wh; if (!tap_h(oy, y, wh)) continue;\n";
  body += "    float inner = 0.0;\n";
  body += "    for (int x = w0; x < w1; ++x) {\n";
  body += "      float ww; if (tap_w(ox, x, ww)) inner += ww * X_ld(base + uint(y * " +
          ilit(g.in_w) + " + x));\n";
  body += "    }\n    acc += wh * inner;\n  }\n  Y_st(i, acc);\n";
  return per_output_kernel(ctx, functions, body);
}

// The node maps gy (the forward's output size) to the forward's input size.
Lowering backward_kernel(const LowerContext& ctx, const AxisFn& axis) {
  const Planes g = planes_of(ctx);
  const bool ac = ctx.node.attrs.as<Resample2dBackwardAttrs>().align_corners;
  const std::string functions = axis({"h", g.out_h, g.in_h}, ac) + axis({"w", g.out_w, g.in_w}, ac);
  std::string body = "  uint gbase = p * " + ulit(g.in_h * g.in_w) + ";\n";
  body += "  int fw = first_w(ox), lw = last_w(ox);\n";
  body += "  float acc = 0.0;\n";
  body += "  for (int oh = first_h(oy); oh <= last_h(oy); ++oh) {\n";
  body += "    float wh; if (!tap_h(oh, oy, wh)) continue;\n";
  body += "    float inner = 0.0;\n";
  body += "    for (int ow = fw; ow <= lw; ++ow) {\n";
  body += "      float ww; if (tap_w(ow, ox, ww)) inner += ww * X_ld(gbase + uint(oh * " +
          ilit(g.in_w) + " + ow));\n";
  body += "    }\n    acc += wh * inner;\n  }\n  Y_st(i, acc);\n";
  return per_output_kernel(ctx, functions, body);
}

void add_pair(LoweringRegistry& r, const std::string& name, const AxisFn& axis) {
  r.add(name, [axis](const LowerContext& ctx) { return forward_kernel(ctx, axis); });
  r.add(name + "_backward", [axis](const LowerContext& ctx) { return backward_kernel(ctx, axis); });
}

}  // namespace

void register_resample_lowerings(LoweringRegistry& r) {
  add_pair(r, "adaptive_avg_pool2d", [](const Axis& x, bool) { return adaptive_axis(x); });
  add_pair(r, "upsample_nearest2d", [](const Axis& x, bool) { return nearest_axis(x); });
  add_pair(r, "upsample_bilinear2d", bilinear_axis);
}

}  // namespace mn::codegen::pool
