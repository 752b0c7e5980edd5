// A 1×1 convolution's operands are matmul operands as they lie in memory: x[n] viewed as
// [C, H·W] is contiguous, and so is w viewed as [O, C]. The lowering therefore lowers a matmul
// node of those shapes (the matmul's scalar tiled or cooperative-matrix kernels) and maps its
// operand bindings back onto the convolution's inputs.
#include "codegen/lower_conv_matmul.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "codegen/glsl.h"
#include "codegen/lower_matmul.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/matmul_epilogue.h"
#include "ir/op_def.h"
#include "ir/ops/conv.h"
#include "ir/ops/matmul.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

// MN_CONV_NO_MATMUL=1 (DeviceTraits::conv_matmul): every convolution keeps its implicit GEMM.
bool disabled(const LowerContext& ctx) { return !ctx.device.conv_matmul; }

// One tap, no padding, unit stride, one group: output pixels are input pixels (dilation
// has nothing to dilate).
bool pointwise(const Conv2dAttrs& a, int64_t kh, int64_t kw) {
  return kh == 1 && kw == 1 && a.stride_h == 1 && a.stride_w == 1 && a.pad_h == 0 && a.pad_w == 0 &&
         a.groups == 1;
}

// An NCHW image as [batch, channels, H·W].
struct Image {
  int64_t batch = 1, channels = 0, h = 0, w = 0;
  int64_t plane() const { return h * w; }
};

Image image(const Shape& s) {
  Image im;
  for (size_t i = 0; i + 3 < s.size(); ++i) im.batch *= s[i];
  const size_t r = s.size();
  im.channels = s[r - 3];
  im.h = s[r - 2];
  im.w = s[r - 1];
  return im;
}

bool same_plane(const Image& a, const Image& b) { return a.h == b.h && a.w == b.w; }

// The matmul kernel for the product, or nullopt where the implicit GEMM serves better.
//
// With MN_CONV_COOP_1X1=1 on a tensor-core device a batch of products is judged by its total
// size: the matmul
// thresholds (kCoopMinOutputs, the short-K rule) count one batch entry, which suits attention
// heads but not a convolution over 32 images, whose products are the column blocks (forward,
// input gradient) or K blocks (weight gradient) of one product. Without the cooperative
// kernel both paths are scalar f32, and the implicit GEMM picks tiles for skinny products and
// splits long K where the matmul would fall back to 16×16 tiles or a GEMV, or leave the device
// idle: only products that fill the matmul's 64×64 tiles, and enough of them or short K, take it.
std::optional<Lowering> lower(const LowerContext& mctx, const MatmulEpilogue* e) {
  const MatmulGeometry g = geometry(mctx);
  const int64_t batch = numel(g.out_batch);
  const auto limit = static_cast<int64_t>(std::numeric_limits<uint32_t>::max());
  if (batch * g.m * g.k > limit || batch * g.k * g.n > limit || batch * g.m * g.n > limit) {
    return std::nullopt;
  }
  // On a tensor-core device the routed products ran slower than the implicit GEMM on most of
  // ResNet-50's 1×1 layers at batch 32 (H200, docs/perf.md: e.g. 64→64 at 56×56 forward 5.4
  // against 9.6 TFLOP/s; 26 of 38 layer-directions lost), because the f16 packing launches of
  // the cooperative path cost more than its products save at these sizes. Until the packing
  // is fused into the producers, tensor-core devices keep the implicit GEMM;
  // MN_CONV_COOP_1X1=1 routes them to the cooperative kernel anyway (for measurements).
  if (mctx.device.coop) {
    if (!mctx.device.conv_coop_1x1) return std::nullopt;
    if (g.m >= 32 && g.n >= 32) {
      MatmulGeometry whole = g;
      whole.n *= batch;
      whole.a_batch = whole.b_batch = whole.out_batch = {};
      const std::optional<int> tile = choose_coop_tile(g, batch, mctx.device);
      if (tile && coop_rejection(mctx, whole, 1).empty()) {
        glsl::require_storage(mctx);
        const CoopTile& t = coop_tiles()[static_cast<size_t>(*tile)];
        return lower_matmul_coop(mctx, g, batch, t, coop_options_for(t, g, mctx.device), e);
      }
    }
    return std::nullopt;
  }
  // The implicit GEMM splits K past 512 when its grid is under 128 workgroups
  // (lower_conv_gemm.cpp); the matmul's tiled kernel never does.
  const int64_t tiles = ((g.m + 63) / 64) * ((g.n + 63) / 64) * batch;
  if (g.m >= 64 && g.n >= 64 && (tiles >= 128 || g.k < 512)) return lower_matmul_fused(mctx, e);
  return std::nullopt;
}

struct Operand {
  int input;  // the convolution's input this matmul operand reads
  Shape shape;
  bool transposed;
};

// The lowering of `a · b` (with their transpose flags) into a tensor of `out` shape, its
// bindings of matmul inputs 0 and 1 renamed to the convolution's inputs. The epilogue's own
// operands must not be inputs 0 or 1 (it only reads a bias, input 2).
std::optional<Lowering> as_matmul(const LowerContext& ctx, const Operand& a, const Operand& b,
                                  const Shape& out, DType out_dtype, const MatmulEpilogue* e) {
  Node node;
  node.op = find_op_def("matmul");
  node.attrs = MatmulAttrs{a.transposed, b.transposed};
  node.type = {out, out_dtype};
  const std::vector<TensorType> in{{a.shape, ctx.inputs[static_cast<size_t>(a.input)].dtype},
                                   {b.shape, ctx.inputs[static_cast<size_t>(b.input)].dtype}};
  // The renaming below applies to every binding: the epilogue's own reads of the convolution's
  // inputs 0 and 1 are spelled in matmul terms first, so they come back as themselves.
  auto as_operand = [&](int input) { return input == a.input ? 0 : 1; };
  MatmulEpilogue renamed = e ? *e : MatmulEpilogue{};
  for (ArgRef& r : renamed.extra) {
    if (r.kind == ArgRef::Kind::input && r.index < 2) r.index = as_operand(r.index);
  }
  std::optional<Lowering> l = lower(LowerContext{node, in, ctx.device}, e ? &renamed : nullptr);
  if (!l) return l;
  for (KernelLaunch& k : l->launches) {
    for (KernelBinding& bind : k.bindings) {
      if (bind.arg.kind == ArgRef::Kind::input && bind.arg.index < 2) {
        bind.arg.index = bind.arg.index == 0 ? a.input : b.input;
      }
    }
  }
  return l;
}

// dx (or conv_transpose2d's output, with its bias) = wᵀ · gy per image; inputs (gy, w[, b]).
std::optional<Lowering> input_gradient(const LowerContext& ctx, const Image& gy, const Image& dx) {
  const Shape& w = ctx.inputs[1].shape;
  const bool bias = ctx.inputs.size() == 3;
  const MatmulEpilogue e = bias ? with_row_bias(nullptr, ctx.inputs[2].dtype, 2) : MatmulEpilogue{};
  return as_matmul(ctx, {1, {w[0], w[1]}, true}, {0, {gy.batch, gy.channels, gy.plane()}, false},
                   {dx.batch, dx.channels, dx.plane()}, ctx.node.type.dtype, bias ? &e : nullptr);
}

}  // namespace

std::optional<Lowering> conv1x1_forward(const LowerContext& ctx, const MatmulEpilogue* e) {
  const auto& a = ctx.node.attrs.as<Conv2dAttrs>();
  const Shape& w = ctx.inputs[1].shape;
  const Image x = image(ctx.inputs[0].shape), y = image(ctx.node.type.shape);
  if (disabled(ctx) || !pointwise(a, w[2], w[3]) || !same_plane(x, y)) return std::nullopt;
  return as_matmul(ctx, {1, {w[0], w[1]}, false}, {0, {x.batch, x.channels, x.plane()}, false},
                   {y.batch, y.channels, y.plane()}, ctx.node.type.dtype, e);
}

std::optional<Lowering> conv1x1_backward_input(const LowerContext& ctx) {
  const auto& b = ctx.node.attrs.as<Conv2dBackwardInputAttrs>();
  const Shape& w = ctx.inputs[1].shape;
  const Image gy = image(ctx.inputs[0].shape), dx = image(ctx.node.type.shape);
  // A gy smaller than dx (allowed by the op) leaves pixels of dx without a product.
  if (disabled(ctx) || !pointwise(b.conv, w[2], w[3]) || !same_plane(gy, dx)) return std::nullopt;
  return input_gradient(ctx, gy, dx);
}

std::optional<Lowering> conv1x1_transpose(const LowerContext& ctx) {
  const auto& t = ctx.node.attrs.as<ConvTranspose2dAttrs>();
  const Shape& w = ctx.inputs[1].shape;
  const Image x = image(ctx.inputs[0].shape), y = image(ctx.node.type.shape);
  // output_padding grows the output past the input's pixels.
  if (disabled(ctx) || !pointwise(t.conv, w[2], w[3]) || !same_plane(x, y)) return std::nullopt;
  return input_gradient(ctx, x, y);
}

std::optional<Lowering> conv1x1_backward_weight(const LowerContext& ctx) {
  const auto& b = ctx.node.attrs.as<Conv2dBackwardWeightAttrs>();
  const Image x = image(ctx.inputs[0].shape), gy = image(ctx.inputs[1].shape);
  if (disabled(ctx) || !pointwise(b.conv, b.kernel_h, b.kernel_w) || !same_plane(x, gy)) {
    return std::nullopt;
  }
  const int64_t o = gy.channels, c = x.channels, hw = x.plane();
  if (x.batch == 1) {
    return as_matmul(ctx, {1, {o, hw}, false}, {0, {c, hw}, true}, {o, c}, ctx.node.type.dtype,
                     nullptr);
  }
  // NCHW keeps each image's [C, H·W] contiguous but not the batch's [C, N·H·W]: one product
  // per image into f32 scratch, then a deterministic sum over the images. Where the partial
  // products would take more memory than the larger operand (and more than 16 MiB), or past
  // 256 MiB, the implicit GEMM (which sums inside its tiles) is used instead: a late layer's
  // few pixels and many channels (ResNet-50's 512 → 2048 at 7 × 7, batch 32: 128 MiB of
  // partials beside 12 MiB of gradient, in products of K = 49) belong to it.
  const int64_t per_image = o * c;
  const auto bytes = static_cast<uint64_t>(x.batch * per_image) * 4;
  const uint64_t operand =
      std::max(static_cast<uint64_t>(x.batch * c * hw) * dtype_size(ctx.inputs[0].dtype),
               static_cast<uint64_t>(gy.batch * o * hw) * dtype_size(ctx.inputs[1].dtype));
  const bool partials_outweigh = bytes > operand && bytes > (uint64_t{16} << 20);
  if (bytes > (uint64_t{256} << 20) || partials_outweigh) return std::nullopt;
  std::optional<Lowering> l =
      as_matmul(ctx, {1, {gy.batch, o, hw}, false}, {0, {x.batch, c, hw}, true}, {x.batch, o, c},
                DType::f32, nullptr);
  if (!l) return l;
  const int part = static_cast<int>(l->scratch_bytes.size());
  l->scratch_bytes.push_back(bytes);
  for (KernelLaunch& k : l->launches) {
    for (KernelBinding& bind : k.bindings) {
      if (bind.arg == ArgRef::output()) bind.arg = ArgRef::scratch(part);
    }
  }
  const std::string decl =
      "layout(std430, set = 0, binding = 0) readonly buffer Buffer0 { float part[]; };\n" +
      glsl::buffer(1, ctx.node.type.dtype, "DW", false);
  const std::string body = "  float acc = 0.0;\n  for (uint b = 0u; b < " + ulit(x.batch) +
                           "; ++b) acc += part[b * " + ulit(per_image) +
                           " + i];\n  DW_st(i, acc);\n";
  KernelLaunch sum = glsl::elementwise_launch(
      "conv1x1_weight_batch_sum", decl, body, static_cast<uint64_t>(per_image), ctx.device,
      {{ArgRef::scratch(part), false}, {ArgRef::output(), true}});
  l->launches.push_back(std::move(sum));
  return l;
}

}  // namespace mn::codegen
