// Max and average pooling: one thread per output element. The backward ops are gathers (each
// input-gradient element sums over the windows that contain it), so no atomics are needed and
// the result is deterministic. Max pooling's backward ops recompute each window's argmax exactly
// as the reference does (once per window, into scratch, where windows overlap): scanning rows
// then columns, the first maximum wins, a NaN wins, padding never wins.
#include "codegen/lower_pool.h"

#include "codegen/glsl.h"
#include "codegen/lower_families.h"
#include "ir/ops/pool.h"

namespace mn::codegen {

namespace pool {

Planes planes_of(const LowerContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  const Shape& out = ctx.node.type.shape;
  const size_t r = in.size();
  Planes p;
  p.in_h = in[r - 2];
  p.in_w = in[r - 1];
  p.out_h = out[r - 2];
  p.out_w = out[r - 1];
  p.planes = numel(out) / (p.out_h * p.out_w);
  return p;
}

KernelLaunch per_output_launch(const LowerContext& ctx, std::string name,
                               const std::string& declarations, std::vector<KernelBinding> bindings,
                               const std::string& body) {
  const Planes g = planes_of(ctx);
  const auto n = static_cast<uint64_t>(ctx.node.type.numel());
  const std::string plane = ulit(g.out_h * g.out_w);
  std::string prologue = "  uint p = i / " + plane + ", q = i % " + plane + ";\n";
  prologue += "  int oy = int(q / " + ulit(g.out_w) + "), ox = int(q % " + ulit(g.out_w) + ");\n";
  return glsl::elementwise_launch(std::move(name), declarations, prologue + body, n, ctx.device,
                                  std::move(bindings));
}

Lowering per_output_kernel(const LowerContext& ctx, const std::string& functions,
                           const std::string& body) {
  std::string decls = glsl::buffer(0, ctx.inputs[0].dtype, "X", true);
  std::vector<KernelBinding> bindings{{ArgRef::input(0), false}};
  if (ctx.inputs.size() > 1) {
    decls += glsl::buffer(1, ctx.inputs[1].dtype, "G", true);
    bindings.push_back({ArgRef::input(1), false});
  }
  decls += glsl::buffer(static_cast<uint32_t>(bindings.size()), ctx.node.type.dtype, "Y", false);
  bindings.push_back({ArgRef::output(), true});
  Lowering l;
  l.launches.push_back(per_output_launch(ctx, std::string(ctx.node.op_name()), decls + functions,
                                         std::move(bindings), body));
  return l;
}

}  // namespace pool

namespace {

using pool::ilit;

// `int window_argmax(uint base, int oy, int ox, out float m)`: the offset within the plane at
// `base` of window (oy, ox)'s maximum (-1 for a window with no element inside the input), with
// the maximum in m (-inf for an empty window).
std::string window_argmax(const MaxPool2dAttrs& a, int64_t h, int64_t w) {
  // Constant trip counts (unrolled) and selects instead of branches; a tap in the padding loads
  // element 0 and is never taken. The first tap inside the input always is, so an all -inf
  // window still names its first element, as the reference's scan does.
  std::string s = "int window_argmax(uint base, int oy, int ox, out float m) {\n";
  s += "  int h0 = oy * " + ilit(a.stride_h) + " - " + ilit(a.pad_h) + ";\n";
  s += "  int w0 = ox * " + ilit(a.stride_w) + " - " + ilit(a.pad_w) + ";\n";
  s += "  int best = -1;\n  m = uintBitsToFloat(0xff800000u);\n";
  s += "  for (int a = 0; a < " + ilit(a.kernel_h) + "; ++a) {\n";
  s += "    int y = h0 + a * " + ilit(a.dilation_h) + ";\n";
  s += "    for (int b = 0; b < " + ilit(a.kernel_w) + "; ++b) {\n";
  s += "      int x = w0 + b * " + ilit(a.dilation_w) + ";\n";
  s += "      bool inside = uint(y) < " + pool::ulit(h) + " && uint(x) < " + pool::ulit(w) + ";\n";
  s += "      int at = y * " + ilit(w) + " + x;\n";
  s += "      float v = X_ld(base + uint(inside ? at : 0));\n";
  s += "      bool take = inside && (best < 0 || v > m || isnan(v));\n";
  s += "      m = take ? v : m;\n      best = take ? at : best;\n";
  s += "    }\n  }\n  return best;\n}\n";
  return s;
}

Lowering lower_max_pool2d(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<MaxPool2dAttrs>();
  const pool::Planes g = pool::planes_of(ctx);
  std::string body = "  float m;\n";
  body += "  window_argmax(p * " + pool::ulit(g.in_h * g.in_w) + ", oy, ox, m);\n";
  body += "  Y_st(i, m);\n";
  return pool::per_output_kernel(ctx, window_argmax(a, g.in_h, g.in_w), body);
}

// max_pool2d_gather(x, g): g read at each window's argmax (zero for an empty window).
Lowering lower_max_pool2d_gather(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<MaxPool2dAttrs>();
  const pool::Planes g = pool::planes_of(ctx);
  const std::string base = "p * " + pool::ulit(g.in_h * g.in_w);
  std::string body = "  float m;\n";
  body += "  int k = window_argmax(" + base + ", oy, ox, m);\n";
  body += "  Y_st(i, k < 0 ? 0.0 : G_ld(" + base + " + uint(k)));\n";
  return pool::per_output_kernel(ctx, window_argmax(a, g.in_h, g.in_w), body);
}

// Statements running `inner` for each window index `w<axis>` (< out) along one axis whose taps
// include input index `c`. Windows that cannot overlap (stride >= span) leave one candidate.
std::string windows_holding(const char* axis, const std::string& c, int64_t out, int64_t k,
                            int64_t s, int64_t p, int64_t d, const std::string& inner) {
  const std::string ax = axis, t = "t" + ax, w = "w" + ax;
  const int64_t span = (k - 1) * d + 1;
  std::string f;
  if (s >= span) {
    f += "  {\n    int " + t + " = " + c + " + " + ilit(p) + ", " + w + " = " + t + " / " +
         ilit(s) + ", r" + ax + " = " + t + " - " + w + " * " + ilit(s) + ";\n";
    f += "    if (" + w + " < " + ilit(out) + " && r" + ax + " < " + ilit(span) +
         (d > 1 ? " && r" + ax + " % " + ilit(d) + " == 0" : "") + ") {\n" + inner + "    }\n  }\n";
    return f;
  }
  f += "  for (int a" + ax + " = 0; a" + ax + " < " + ilit(k) + "; ++a" + ax + ") {\n";
  f += "    int " + t + " = " + c + " + " + ilit(p) + " - a" + ax + " * " + ilit(d) + ";\n";
  f += "    if (" + t + " < 0 || " + t + " % " + ilit(s) + " != 0) continue;\n";
  f += "    int " + w + " = " + t + " / " + ilit(s) + ";\n";
  f += "    if (" + w + " >= " + ilit(out) + ") continue;\n";
  f += inner + "  }\n";
  return f;
}

// Non-overlapping windows (stride >= span on both axes): the input splits into stride-sized
// cells, cell (cy, cx) holding every tap of window (cy, cx) and nothing of any other window. One
// thread per cell finds the window's argmax once and writes the whole cell: gy there, zero
// elsewhere (also for cells past the last window). A quarter of the memory traffic of the gather
// below for 2×2 pooling.
Lowering max_pool2d_backward_cells(const LowerContext& ctx, const MaxPool2dAttrs& a,
                                   const pool::Planes& g, int64_t ph, int64_t pw) {
  const int64_t cy_n = (g.in_h - 1 + a.pad_h) / a.stride_h + 1;
  const int64_t cx_n = (g.in_w - 1 + a.pad_w) / a.stride_w + 1;
  const auto n = static_cast<uint64_t>(g.planes * cy_n * cx_n);
  std::string decls = glsl::buffer(0, ctx.inputs[0].dtype, "X", true) +
                      glsl::buffer(1, ctx.inputs[1].dtype, "G", true) +
                      glsl::buffer(2, ctx.node.type.dtype, "Y", false) +
                      window_argmax(a, g.in_h, g.in_w);
  const std::string cells = pool::ulit(cy_n * cx_n);
  std::string body = "  uint p = i / " + cells + ", q = i % " + cells + ";\n";
  body += "  int cy = int(q / " + pool::ulit(cx_n) + "), cx = int(q % " + pool::ulit(cx_n) + ");\n";
  body += "  uint base = p * " + pool::ulit(g.in_h * g.in_w) + ";\n";
  // A cell past the last window reads a clamped one, whose taps (and argmax) lie in another
  // cell, so it writes zeros.
  body += "  int wy = min(cy, " + ilit(ph - 1) + "), wx = min(cx, " + ilit(pw - 1) + ");\n";
  body += "  float m;\n  int best = window_argmax(base, wy, wx, m);\n";
  body +=
      "  float gv = G_ld(p * " + pool::ulit(ph * pw) + " + uint(wy * " + ilit(pw) + " + wx));\n";
  body += "  for (int a = 0; a < " + ilit(a.stride_h) + "; ++a) {\n";
  body += "    int y = cy * " + ilit(a.stride_h) + " - " + ilit(a.pad_h) + " + a;\n";
  body += "    if (uint(y) >= " + pool::ulit(g.in_h) + ") continue;\n";
  body += "    for (int b = 0; b < " + ilit(a.stride_w) + "; ++b) {\n";
  body += "      int x = cx * " + ilit(a.stride_w) + " - " + ilit(a.pad_w) + " + b;\n";
  body += "      if (uint(x) >= " + pool::ulit(g.in_w) + ") continue;\n";
  body += "      int at = y * " + ilit(g.in_w) + " + x;\n";
  body += "      Y_st(base + uint(at), at == best ? gv : 0.0);\n";
  body += "    }\n  }\n";

  KernelLaunch k = glsl::elementwise_launch(
      "max_pool2d_backward_cells", decls, body, n, ctx.device,
      {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}});
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

// max_pool2d_backward(x, gy): each input element sums gy over the windows whose tap grid holds it
// and whose argmax it is. Overlapping windows take two launches: one thread per window stores its
// argmax (an int per window, in scratch), then one thread per input element compares its offset
// with the stored argmax of each window holding it. Recomputing every argmax in the gather read
// x (windows holding an element) × (taps of a window) times per element: 36 for ResNet's 3×3
// stride-2 pooling, against 9 per window here.
Lowering lower_max_pool2d_backward(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<MaxPool2dAttrs>();
  const pool::Planes g = pool::planes_of(ctx);  // here in = out = x's plane
  const Shape& gy = ctx.inputs[1].shape;
  const int64_t ph = gy[gy.size() - 2], pw = gy[gy.size() - 1];
  if (a.stride_h >= (a.kernel_h - 1) * a.dilation_h + 1 &&
      a.stride_w >= (a.kernel_w - 1) * a.dilation_w + 1) {
    return max_pool2d_backward_cells(ctx, a, g, ph, pw);
  }
  const ArgRef argmax = ArgRef::scratch(0);
  const auto windows = static_cast<uint64_t>(g.planes * ph * pw);
  std::string find =
      "  uint p = i / " + pool::ulit(ph * pw) + ", q = i % " + pool::ulit(ph * pw) + ";\n";
  find += "  float m;\n  A_sti(i, window_argmax(p * " + pool::ulit(g.in_h * g.in_w) + ", int(q / " +
          pool::ulit(pw) + "), int(q % " + pool::ulit(pw) + "), m));\n";
  Lowering l;
  l.launches.push_back(glsl::elementwise_launch(
      "max_pool2d_backward_argmax",
      glsl::buffer(0, ctx.inputs[0].dtype, "X", true) + glsl::buffer(1, DType::i32, "A", false) +
          window_argmax(a, g.in_h, g.in_w),
      find, windows, ctx.device, {{ArgRef::input(0), false}, {argmax, true}}));
  l.scratch_bytes.push_back(windows * 4);

  std::string body = "  uint gbase = p * " + pool::ulit(ph * pw) + ";\n";
  body += "  int here = oy * " + ilit(g.in_w) + " + ox;\n";
  body += "  float acc = 0.0;\n";
  const std::string add = "      uint at = gbase + uint(wy * " + ilit(pw) +
                          " + wx);\n      if (A_ldi(at) == here) acc += G_ld(at);\n";
  body += windows_holding(
      "y", "oy", ph, a.kernel_h, a.stride_h, a.pad_h, a.dilation_h,
      windows_holding("x", "ox", pw, a.kernel_w, a.stride_w, a.pad_w, a.dilation_w, add));
  body += "  Y_st(i, acc);\n";
  l.launches.push_back(pool::per_output_launch(
      ctx, "max_pool2d_backward",
      glsl::buffer(0, DType::i32, "A", true) + glsl::buffer(1, ctx.inputs[1].dtype, "G", true) +
          glsl::buffer(2, ctx.node.type.dtype, "Y", false),
      {{argmax, false}, {ArgRef::input(1), false}, {ArgRef::output(), true}}, body));
  return l;
}

// `void avg_window_<axis>(int o, out int lo, out int hi, out int size)`: the taps [lo, hi) of
// output index o inside the input, and the window's size clipped to the padded input (PyTorch's
// count_include_pad divisor).
std::string avg_window(const char* axis, int64_t in, int64_t k, int64_t s, int64_t p) {
  std::string f =
      "void avg_window_" + std::string(axis) + "(int o, out int lo, out int hi, out int size) {\n";
  f += "  int start = o * " + ilit(s) + " - " + ilit(p) + ";\n";
  f += "  int end = min(start + " + ilit(k) + ", " + ilit(in + p) + ");\n";
  f += "  size = end - start; lo = max(start, 0); hi = min(end, " + ilit(in) + ");\n}\n";
  return f;
}

std::string avg_windows(const AvgPool2dAttrs& a, int64_t in_h, int64_t in_w) {
  return avg_window("h", in_h, a.kernel_h, a.stride_h, a.pad_h) +
         avg_window("w", in_w, a.kernel_w, a.stride_w, a.pad_w);
}

std::string avg_divisor(const AvgPool2dAttrs& a) {
  return a.count_include_pad ? "float(hs * ws)" : "float((h1 - h0) * (w1 - w0))";
}

Lowering lower_avg_pool2d(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<AvgPool2dAttrs>();
  const pool::Planes g = pool::planes_of(ctx);
  std::string body = "  int h0, h1, hs, w0, w1, ws;\n";
  body += "  avg_window_h(oy, h0, h1, hs); avg_window_w(ox, w0, w1, ws);\n";
  body += "  if (h0 >= h1 || w0 >= w1) { Y_st(i, 0.0); return; }\n";
  body += "  uint base = p * " + pool::ulit(g.in_h * g.in_w) + ";\n";
  body += "  float acc = 0.0;\n";
  body +=
      "  for (int y = h0; y < h1; ++y) for (int x = w0; x < w1; ++x) acc += X_ld(base + "
      "uint(y * " +
      ilit(g.in_w) + " + x));\n";
  body += "  Y_st(i, acc / " + avg_divisor(a) + ");\n";
  return pool::per_output_kernel(ctx, avg_windows(a, g.in_h, g.in_w), body);
}

// Statements looping `o<axis>` over the outputs whose window along the axis may contain input
// index `c` (a superset; the body checks membership).
std::string window_range(const char* axis, const std::string& c, int64_t out, int64_t k, int64_t s,
                         int64_t p) {
  const std::string o = std::string("o") + axis;
  std::string f = "    int " + o + "_t = " + c + " + " + ilit(p - k + 1) + ";\n";
  f += "    int " + o + "_lo = " + o + "_t <= 0 ? 0 : (" + o + "_t + " + ilit(s - 1) + ") / " +
       ilit(s) + ";\n";
  f += "    int " + o + "_hi = min(" + ilit(out - 1) + ", (" + c + " + " + ilit(p) + ") / " +
       ilit(s) + ");\n";
  f += "    for (int " + o + " = " + o + "_lo; " + o + " <= " + o + "_hi; ++" + o + ")";
  return f;
}

// avg_pool2d_backward(gy): each input element gathers gy / divisor over the windows holding it.
Lowering lower_avg_pool2d_backward(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<AvgPool2dBackwardAttrs>().pool;
  const pool::Planes g = pool::planes_of(ctx);  // in: gy's plane, out: x's plane
  std::string body = "  uint gbase = p * " + pool::ulit(g.in_h * g.in_w) + ";\n";
  body += "  float acc = 0.0;\n  {\n";
  body += window_range("h", "oy", g.in_h, a.kernel_h, a.stride_h, a.pad_h) + " {\n";
  body += "      int h0, h1, hs; avg_window_h(oh, h0, h1, hs);\n";
  body += "      if (oy < h0 || oy >= h1) continue;\n";
  body += "  " + window_range("w", "ox", g.in_w, a.kernel_w, a.stride_w, a.pad_w) + " {\n";
  body += "        int w0, w1, ws; avg_window_w(ow, w0, w1, ws);\n";
  body += "        if (ox < w0 || ox >= w1) continue;\n";
  body += "        acc += X_ld(gbase + uint(oh * " + ilit(g.in_w) + " + ow)) / " + avg_divisor(a) +
          ";\n";
  body += "      }\n    }\n  }\n  Y_st(i, acc);\n";
  // Windows are over x's plane (the node's output).
  return pool::per_output_kernel(ctx, avg_windows(a, g.out_h, g.out_w), body);
}

}  // namespace

void register_pool_lowerings(LoweringRegistry& r) {
  r.add("max_pool2d", lower_max_pool2d);
  r.add("max_pool2d_backward", lower_max_pool2d_backward);
  r.add("max_pool2d_gather", lower_max_pool2d_gather);
  r.add("avg_pool2d", lower_avg_pool2d);
  r.add("avg_pool2d_backward", lower_avg_pool2d_backward);
  pool::register_resample_lowerings(r);
}

}  // namespace mn::codegen
