// Convolutions as implicit GEMMs (lower_conv_gemm.cpp), one GEMM per group:
//   conv2d:                 M = N·OH·OW, N = O,            K = C/groups·kh·kw
//   conv2d_backward_input:  M = N·H·W,   N = C/groups,     K = O/groups·kh·kw; with stride,
//                           one GEMM per phase of the input pixels over only the taps that reach
//                           them (M = N·pixels of the phase, K = O/groups·taps of the phase)
//   conv2d_backward_weight: M = O/groups, N = C/groups·kh·kw, K = N·OH·OW (split across
//                           workgroups when the weight alone is too small to fill the device)
//   conv_transpose2d:       conv2d_backward_input of its attributes, plus bias.
// 1×1 convolutions with unit stride, no padding and one group are matmuls instead
// (lower_conv_matmul.cpp).
// Indices are unsigned: a tap in the padding wraps to a huge value and fails the bounds check.
#include <algorithm>
#include <vector>

#include <meganeura/error.h>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_conv.h"
#include "codegen/lower_conv_gemm.h"
#include "codegen/lower_conv_matmul.h"
#include "codegen/lower_families.h"
#include "ir/ops/conv.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

// A convolution in the terms of the forward conv2d: input [batch, c, h, w], weight
// [o, c/groups, kh, kw], output [batch, o, oh, ow].
struct ConvDims {
  Conv2dAttrs a;
  int64_t batch = 1, c = 0, h = 0, w = 0, o = 0, oh = 0, ow = 0, kh = 0, kw = 0;
  int64_t cg() const { return c / a.groups; }
  int64_t og() const { return o / a.groups; }
  int64_t khw() const { return kh * kw; }
};

int64_t leading_numel(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 3 < s.size(); ++i) n *= s[i];
  return n;
}

// From the forward input's shape, the forward output's shape and the kernel size.
ConvDims dims(const Conv2dAttrs& a, const Shape& x, const Shape& y, int64_t kh, int64_t kw) {
  const size_t r = x.size();
  return {a, leading_numel(x), x[r - 3], x[r - 2], x[r - 1], y[r - 3], y[r - 2], y[r - 1], kh, kw};
}

// Statements splitting `k` (or another index) into channel `c`, kernel row `i` and column `j`.
std::string split_tap(const ConvDims& d, const std::string& index, const std::string& channel) {
  return "  uint " + channel + " = " + index + " / " + ulit(d.khw()) + ", r = " + index + " % " +
         ulit(d.khw()) + ", i = r / " + ulit(d.kw) + ", j = r % " + ulit(d.kw) + ";\n";
}

// The forward input element under output position (oh, ow), tap (c, i, j) of group g, or zero
// in the padding.
std::string read_input(const ConvDims& d, const std::string& buf) {
  std::string s = "  uint ih = oh * " + ulit(d.a.stride_h) + " + i * " + ulit(d.a.dilation_h) +
                  " - " + ulit(d.a.pad_h) + ", iw = ow * " + ulit(d.a.stride_w) + " + j * " +
                  ulit(d.a.dilation_w) + " - " + ulit(d.a.pad_w) + ";\n";
  s += "  bool ok = ih < " + ulit(d.h) + " && iw < " + ulit(d.w) + ";\n";
  s += "  float v = " + buf + "_ld(ok ? ((b * " + ulit(d.c) + " + g * " + ulit(d.cg()) +
       " + c) * " + ulit(d.h) + " + ih) * " + ulit(d.w) + " + iw : 0u);\n";
  s += "  return ok ? v : 0.0;\n";
  return s;
}

std::string split_position(const std::string& index, int64_t plane, int64_t width,
                           const std::string& row, const std::string& col) {
  return "  uint b = " + index + " / " + ulit(plane) + ", p = " + index + " % " + ulit(plane) +
         ";\n" + "  uint " + row + " = p / " + ulit(width) + ", " + col + " = p % " + ulit(width) +
         ";\n";
}

}  // namespace

Lowering lower_conv2d_fused(const LowerContext& ctx, const MatmulEpilogue* e) {
  const bool bias = ctx.inputs.size() == 3;
  // The bias is one more epilogue step, so both kernels (and any fused consumers) see it.
  const MatmulEpilogue with_bias =
      bias ? with_row_bias(e, ctx.inputs[2].dtype, 2) : (e ? *e : MatmulEpilogue{});
  const MatmulEpilogue* epi = bias || e ? &with_bias : nullptr;
  if (auto l = conv1x1_forward(ctx, epi)) return std::move(*l);
  const auto& a = ctx.node.attrs.as<Conv2dAttrs>();
  const Shape& w = ctx.inputs[1].shape;
  const ConvDims d = dims(a, ctx.inputs[0].shape, ctx.node.type.shape, w[2], w[3]);
  const int64_t plane = d.oh * d.ow;

  ImplicitGemm g;
  g.name = "conv2d";
  g.m = d.batch * plane;
  g.n = d.og();
  g.k = d.cg() * d.khw();
  g.groups = a.groups;
  g.a_k_fast = false;  // x is contiguous along output columns
  g.b_k_fast = true;   // w[o] is contiguous along (c, i, j)
  g.c_n_fast = false;
  // Bindings as the matmul kernels have them: x, w, y, then the epilogue's operands.
  g.declarations = glsl::buffer(0, ctx.inputs[0].dtype, "X", true) +
                   glsl::buffer(1, ctx.inputs[1].dtype, "Wt", true) +
                   glsl::buffer(2, ctx.node.type.dtype, "Y", false);
  g.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  g.a_source = "X";
  g.a_source_count = ctx.inputs[0].numel();
  g.b_source = "Wt";
  g.b_source_count = ctx.inputs[1].numel();
  if (epi) {
    g.declarations += epi->declarations;
    for (const ArgRef& r : epi->extra) g.bindings.push_back({r, r.kind == ArgRef::Kind::output});
  }
  g.declarations += epilogue_function(epi);
  g.a_at =
      split_position("m", plane, d.ow, "oh", "ow") + split_tap(d, "k", "c") + read_input(d, "X");
  g.b_at = "  return Wt_ld((g * " + ulit(d.og()) + " + n) * " + ulit(g.k) + " + k);\n";
  g.c_store = "  uint b = m / " + ulit(plane) + ", p = m % " + ulit(plane) + ";\n";
  g.c_store += "  uint oc = g * " + ulit(d.og()) + " + n;\n";
  g.c_store +=
      "  Y_st((b * " + ulit(d.o) + " + oc) * " + ulit(plane) + " + p, mm_epilogue(v, b, oc, p));\n";
  g.split_k = true;
  // Measured on the H100 (docs/perf.md, ResNet-50's layers at batch 32): 1×1 layers of 256 to
  // 1024 output channels 0.17-0.35 → 0.11-0.26 ms staged; of 64 slower (0.10 → 0.13 ms).
  g.staged_when_unpacked = d.khw() == 1 && g.n >= 128;
  Lowering l = lower_implicit_gemm(g, ctx.device);
  if (3 + (epi ? epi->extra.size() : 0) + l.scratch_bytes.size() > ctx.device.max_storage_buffers) {
    throw Error("conv2d: the fused epilogue binds more buffers than the device allows");
  }
  return l;
}

namespace {

Lowering lower_conv2d(const LowerContext& ctx) { return lower_conv2d_fused(ctx, nullptr); }

Lowering lower_strided_input_gradient(const LowerContext& ctx, const ConvDims& d, const char* name);

// The operands of an input-gradient GEMM (unit stride or one stride phase): gy and w read,
// the bias when there is one (conv_transpose2d), dx written; their layouts along K.
void input_gradient_operands(ImplicitGemm& g, const LowerContext& ctx, int64_t groups) {
  const bool bias = ctx.inputs.size() == 3;
  g.groups = groups;
  g.a_k_fast = false;  // gy is contiguous along output columns
  g.b_k_fast = true;   // w[o, c] is contiguous along (i, j)
  g.c_n_fast = false;
  g.declarations = glsl::buffer(0, ctx.inputs[0].dtype, "GY", true) +
                   glsl::buffer(1, ctx.inputs[1].dtype, "Wt", true);
  g.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}};
  g.a_source = "GY";
  g.a_source_count = ctx.inputs[0].numel();
  g.b_source = "Wt";
  g.b_source_count = ctx.inputs[1].numel();
  if (bias) {
    g.declarations += glsl::buffer(2, ctx.inputs[2].dtype, "Bias", true);
    g.bindings.push_back({ArgRef::input(2), false});
  }
  g.declarations +=
      glsl::buffer(static_cast<uint32_t>(g.bindings.size()), ctx.node.type.dtype, "DX", false);
  g.bindings.push_back({ArgRef::output(), true});
}

// dx = the adjoint of conv2d in x, applied to gy (inputs: gy, w[, bias]); d is the forward
// convolution whose input dx is.
Lowering lower_input_gradient(const LowerContext& ctx, const ConvDims& d, const char* name) {
  const bool bias = ctx.inputs.size() == 3;
  const int64_t plane = d.h * d.w;
  const Conv2dAttrs& a = d.a;
  if (a.stride_h > 1 || a.stride_w > 1) return lower_strided_input_gradient(ctx, d, name);

  ImplicitGemm g;
  g.name = name;
  g.m = d.batch * plane;
  g.n = d.cg();
  g.k = d.og() * d.khw();
  input_gradient_operands(g, ctx, a.groups);

  // Unit stride (lower_strided_input_gradient takes the others): input pixel (y, x) meets
  // output (oh, ow) through tap (i, j) when y + pad - i·dilation = oh.
  std::string at = split_position("m", plane, d.w, "y", "x") + split_tap(d, "k", "o");
  at += "  uint th = y + " + ulit(a.pad_h) + " - i * " + ulit(a.dilation_h) + ", tw = x + " +
        ulit(a.pad_w) + " - j * " + ulit(a.dilation_w) + ";\n";
  at += "  uint oh = th / " + ulit(a.stride_h) + ", ow = tw / " + ulit(a.stride_w) + ";\n";
  at += "  bool ok = oh < " + ulit(d.oh) + " && ow < " + ulit(d.ow);
  at += ";\n";
  at += "  float v = GY_ld(ok ? ((b * " + ulit(d.o) + " + g * " + ulit(d.og()) + " + o) * " +
        ulit(d.oh) + " + oh) * " + ulit(d.ow) + " + ow : 0u);\n";
  at += "  return ok ? v : 0.0;\n";
  g.a_at = std::move(at);
  g.b_at = "  uint o = k / " + ulit(d.khw()) + ", r = k % " + ulit(d.khw()) + ";\n" +
           "  return Wt_ld(((g * " + ulit(d.og()) + " + o) * " + ulit(d.cg()) + " + n) * " +
           ulit(d.khw()) + " + r);\n";
  g.c_store = "  uint b = m / " + ulit(plane) + ", p = m % " + ulit(plane) + ";\n";
  g.c_store += "  uint ic = g * " + ulit(d.cg()) + " + n;\n";
  g.c_store += "  DX_st((b * " + ulit(d.c) + " + ic) * " + ulit(plane) + " + p, v" +
               (bias ? " + Bias_ld(ic)" : "") + ");\n";
  g.split_k = true;
  // Measured as the forward's (above): 1×1 from 64 or 128 output channels back to 256 or 512
  // input channels 0.35 → 0.15 and 0.27 → 0.12 ms staged; from 256 to 1024 slower (0.21 →
  // 0.31), as are those back to 64 channels. The staged kernel reads w across its rows here.
  g.staged_when_unpacked = d.khw() == 1 && g.n >= 128 && g.k <= 128;
  return lower_implicit_gemm(g, ctx.device);
}

// One axis of a strided input gradient split by phase: the input rows y ≡ first (mod stride)
// (count of them) meet output rows only through the taps first_tap + t·tap_step, t < taps, at
// output row q + base - t·out_step for the q-th row of the phase.
struct AxisPhase {
  int64_t first = 0, count = 0, first_tap = 0, taps = 0, tap_step = 1, base = 0, out_step = 0;
};

// Phase p (0 <= p < stride) of an axis: the rows with (y + pad) % stride == p. A tap i reaches
// them when i·dilation ≡ p (mod stride); those taps form the progression first_tap + t·stride/gcd
// (none when gcd(dilation, stride) does not divide p), so every (pixel, tap) pair of the phase's
// GEMM is a real one.
AxisPhase axis_phase(int64_t p, int64_t size, int64_t kernel, int64_t stride, int64_t pad,
                     int64_t dilation) {
  AxisPhase a;
  a.first = ((p - pad) % stride + stride) % stride;
  a.count = a.first < size ? (size - a.first + stride - 1) / stride : 0;
  std::vector<int64_t> taps;
  for (int64_t i = 0; i < kernel; ++i) {
    if (i * dilation % stride == p) taps.push_back(i);
  }
  a.taps = static_cast<int64_t>(taps.size());
  if (a.taps == 0) return a;
  a.first_tap = taps[0];
  a.tap_step = a.taps > 1 ? taps[1] - taps[0] : 1;
  for (int64_t t = 0; t < a.taps; ++t) {
    if (taps[t] != a.first_tap + t * a.tap_step) {
      throw Error("conv2d input gradient: the taps of phase " + std::to_string(p) +
                  " are not evenly spaced");
    }
  }
  // y + pad - i·dilation is a multiple of the stride for every row and tap of the phase.
  a.base = (a.first + pad - a.first_tap * dilation) / stride;
  a.out_step = a.tap_step * dilation / stride;
  return a;
}

std::string si(int64_t v) { return "(" + std::to_string(v) + ")"; }

// Appends `part` to `l`, renumbering its scratch buffers after those `l` already has.
void append_lowering(Lowering& l, Lowering part) {
  const int offset = static_cast<int>(l.scratch_bytes.size());
  for (KernelLaunch& k : part.launches) {
    for (KernelBinding& b : k.bindings) {
      if (b.arg.kind == ArgRef::Kind::scratch) b.arg.index += offset;
    }
    l.launches.push_back(std::move(k));
  }
  l.scratch_bytes.insert(l.scratch_bytes.end(), part.scratch_bytes.begin(),
                         part.scratch_bytes.end());
}

// With stride > 1, a dense implicit GEMM per phase (sub-pixel decomposition): the input pixels
// of phase (ph, pw) take only the taps that reach them, so no multiply-add is spent on a tap off
// the stride grid. The phases write disjoint pixels of dx; a phase no tap reaches (a kernel
// smaller than the stride) is filled with zero (or the bias).
Lowering lower_strided_input_gradient(const LowerContext& ctx, const ConvDims& d,
                                      const char* name) {
  const bool bias = ctx.inputs.size() == 3;
  const Conv2dAttrs& a = d.a;
  const int64_t plane = d.h * d.w;
  Lowering l;
  for (int64_t ph = 0; ph < a.stride_h; ++ph) {
    const AxisPhase py = axis_phase(ph, d.h, d.kh, a.stride_h, a.pad_h, a.dilation_h);
    for (int64_t pw = 0; pw < a.stride_w; ++pw) {
      const AxisPhase px = axis_phase(pw, d.w, d.kw, a.stride_w, a.pad_w, a.dilation_w);
      const int64_t pixels = py.count * px.count;
      if (pixels == 0) continue;
      const std::string phase_name =
          std::string(name) + "_phase" + std::to_string(ph) + "x" + std::to_string(pw);
      // The phase's pixel (b, qy, qx) is dx's (b, first_y + qy·sh, first_x + qx·sw).
      const std::string position = "  uint b = m / " + ulit(pixels) + ", p = m % " + ulit(pixels) +
                                   ";\n  uint qy = p / " + ulit(px.count) + ", qx = p % " +
                                   ulit(px.count) + ";\n";
      const std::string dx_index = "(b * " + ulit(d.c) + " + ic) * " + ulit(plane) + " + (" +
                                   ulit(py.first) + " + qy * " + ulit(a.stride_h) + ") * " +
                                   ulit(d.w) + " + " + ulit(px.first) + " + qx * " +
                                   ulit(a.stride_w);

      if (py.taps * px.taps == 0) {
        KernelLaunch fill;
        fill.name = phase_name + "_zero";
        const auto total = static_cast<uint64_t>(d.batch * d.c * pixels);
        const glsl::Linear grid = glsl::linear_grid(total, ctx.device);
        fill.glsl = glsl::header() + glsl::buffer(0, ctx.node.type.dtype, "DX", false);
        fill.bindings = {{ArgRef::output(), true}};
        if (bias) {
          fill.glsl += glsl::buffer(1, ctx.inputs[2].dtype, "Bias", true);
          fill.bindings.push_back({ArgRef::input(2), false});
        }
        // Element e is (b, ic, pixel) of the phase, so consecutive threads walk its pixels.
        fill.glsl += glsl::gid_function() + "void main() {\n  uint e = gid();\n  if (e >= " +
                     ulit(static_cast<int64_t>(total)) + ") return;\n  uint m = e / " +
                     ulit(d.c * pixels) + " * " + ulit(pixels) + " + e % " + ulit(pixels) +
                     ", ic = e / " + ulit(pixels) + " % " + ulit(d.c) + ";\n" + position +
                     "  DX_st(" + dx_index + ", " + (bias ? "Bias_ld(ic)" : "0.0") + ");\n}\n";
        fill.workgroup = {grid.local, 1, 1};
        fill.groups = grid.groups;
        l.launches.push_back(std::move(fill));
        continue;
      }

      const int64_t taps = py.taps * px.taps;
      ImplicitGemm g;
      g.name = phase_name;
      g.m = d.batch * pixels;
      g.n = d.cg();
      g.k = d.og() * taps;
      input_gradient_operands(g, ctx, a.groups);

      const std::string tap = "  uint o = k / " + ulit(taps) + ", t = k % " + ulit(taps) +
                              ", ti = t / " + ulit(px.taps) + ", tj = t % " + ulit(px.taps) + ";\n";
      // Exact output coordinates; only the image border is checked (a negative one wraps).
      std::string at = position + tap;
      at += "  uint oh = uint(int(qy) + " + si(py.base) + " - int(ti) * " + si(py.out_step) +
            "), ow = uint(int(qx) + " + si(px.base) + " - int(tj) * " + si(px.out_step) + ");\n";
      at += "  bool ok = oh < " + ulit(d.oh) + " && ow < " + ulit(d.ow) + ";\n";
      at += "  float v = GY_ld(ok ? ((b * " + ulit(d.o) + " + g * " + ulit(d.og()) + " + o) * " +
            ulit(d.oh) + " + oh) * " + ulit(d.ow) + " + ow : 0u);\n";
      at += "  return ok ? v : 0.0;\n";
      g.a_at = std::move(at);
      g.b_at = tap + "  return Wt_ld(((g * " + ulit(d.og()) + " + o) * " + ulit(d.cg()) +
               " + n) * " + ulit(d.khw()) + " + (" + ulit(py.first_tap) + " + ti * " +
               ulit(py.tap_step) + ") * " + ulit(d.kw) + " + " + ulit(px.first_tap) + " + tj * " +
               ulit(px.tap_step) + ");\n";
      g.c_store = position + "  uint ic = g * " + ulit(d.cg()) + " + n;\n";
      g.c_store += "  DX_st(" + dx_index + ", v" + (bias ? " + Bias_ld(ic)" : "") + ");\n";
      g.split_k = true;
      append_lowering(l, lower_implicit_gemm(g, ctx.device));
    }
  }
  return l;
}

Lowering lower_backward_input(const LowerContext& ctx) {
  if (auto l = conv1x1_backward_input(ctx)) return std::move(*l);
  const auto& b = ctx.node.attrs.as<Conv2dBackwardInputAttrs>();
  const Shape& w = ctx.inputs[1].shape;
  return lower_input_gradient(ctx,
                              dims(b.conv, ctx.node.type.shape, ctx.inputs[0].shape, w[2], w[3]),
                              "conv2d_backward_input");
}

// conv_transpose2d(x, w) is the input gradient of the convolution whose output x is and whose
// input the node's output is (weight layouts agree).
Lowering lower_conv_transpose2d(const LowerContext& ctx) {
  if (auto l = conv1x1_transpose(ctx)) return std::move(*l);
  const auto& t = ctx.node.attrs.as<ConvTranspose2dAttrs>();
  const Shape& w = ctx.inputs[1].shape;
  return lower_input_gradient(
      ctx, dims(t.conv, ctx.node.type.shape, ctx.inputs[0].shape, w[2], w[3]), "conv_transpose2d");
}

Lowering lower_backward_weight(const LowerContext& ctx) {
  if (auto l = conv1x1_backward_weight(ctx)) return std::move(*l);
  const auto& bw = ctx.node.attrs.as<Conv2dBackwardWeightAttrs>();
  const ConvDims d =
      dims(bw.conv, ctx.inputs[0].shape, ctx.inputs[1].shape, bw.kernel_h, bw.kernel_w);
  const int64_t plane = d.oh * d.ow;

  ImplicitGemm g;
  g.name = "conv2d_backward_weight";
  g.m = d.og();
  g.n = d.cg() * d.khw();
  g.k = d.batch * plane;
  g.groups = d.a.groups;
  g.a_k_fast = true;  // gy is contiguous along output positions
  g.b_k_fast = true;  // and so is the input under them (stride apart)
  g.c_n_fast = true;  // dw[o] is contiguous along (c, i, j)
  g.declarations = glsl::buffer(0, ctx.inputs[0].dtype, "X", true) +
                   glsl::buffer(1, ctx.inputs[1].dtype, "GY", true) +
                   glsl::buffer(2, ctx.node.type.dtype, "DW", false);
  g.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  g.a_source = "GY";
  g.a_source_count = ctx.inputs[1].numel();
  g.b_source = "X";
  g.b_source_count = ctx.inputs[0].numel();
  g.a_at = "  uint b = k / " + ulit(plane) + ", p = k % " + ulit(plane) + ";\n" +
           "  return GY_ld((b * " + ulit(d.o) + " + g * " + ulit(d.og()) + " + m) * " +
           ulit(plane) + " + p);\n";
  g.b_at =
      split_position("k", plane, d.ow, "oh", "ow") + split_tap(d, "n", "c") + read_input(d, "X");
  g.c_store = "  DW_st((g * " + ulit(d.og()) + " + m) * " + ulit(g.n) + " + n, v);\n";
  g.split_k = true;
  // The portable kernel's gather of taps is slow over a long K, and packing once pays for
  // narrower products than the forward's: measured on the H100 (docs/perf.md, ResNet-50's
  // layers at batch 32), the packed path won to 1/M + 1/N = 0.022 with taps (the stem,
  // 64-channel 3×3 layers: 1.33 → 0.69, 0.86 → 0.39 ms) and to 0.0098 for 1×1 layers
  // (128 × 512: 0.22 → 0.15 ms), and lost at 0.0195 for 1×1 layers (64 × 256: 0.22 → 0.28).
  g.coop_max_pack_per_mac = d.khw() > 1 ? 0.025 : 0.012;
  // Narrower 1×1 weight gradients: staged 0.22 → 0.17 ms with 64 × 256 or 256 × 64 outputs,
  // slower with 64 × 64 (0.12 → 0.14).
  g.staged_when_unpacked = d.khw() == 1 && std::max(g.m, g.n) >= 256;
  return lower_implicit_gemm(g, ctx.device);
}

}  // namespace

void register_conv_lowerings(LoweringRegistry& r) {
  r.add("conv2d", lower_conv2d);
  r.add("conv_transpose2d", lower_conv_transpose2d);
  r.add("conv2d_backward_input", lower_backward_input);
  r.add("conv2d_backward_weight", lower_backward_weight);
}

}  // namespace mn::codegen
