// GPU lowerings of the nn family. softmax, log_softmax and the normalizations are row kernels
// (lower_nn_rows.h): one dispatch instead of their decompositions' ~5. batch_norm in eval mode
// and dropout are elementwise.
#include <cmath>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "codegen/lower_nn_rows.h"
#include "ir/ops/nn.h"
#include "ir/ops/nn_util.h"
#include "ir/random.h"

namespace mn::codegen {

namespace {

using nn_lowering::RowOp;
using nn_lowering::RowStats;

using glsl::ulit;

// Rows of n contiguous elements.
void contiguous_rows(RowOp& op, uint64_t total, uint64_t n) {
  op.n = n;
  op.rows = n == 0 ? 0 : total / n;
  op.elem = "r * " + ulit(n) + " + j";
  op.row_of = "e / " + ulit(std::max<uint64_t>(n, 1));
  op.col_of = "e % " + ulit(std::max<uint64_t>(n, 1));
}

// (x - a) * b, then times gamma and plus beta at index `index` where present.
std::string affine_epilogue(bool gamma, bool beta, const std::string& index) {
  std::string s = "  float y = (x - a) * b;\n";
  if (gamma) s += "  y *= gamma_ld(" + index + ");\n";
  if (beta) s += "  y += beta_ld(" + index + ");\n";
  return s + "  return y;\n";
}

// gamma and beta as params, from operand 1 on.
void affine_params(RowOp& op, bool gamma, bool beta) {
  int next = 1;
  if (gamma) op.params.emplace_back(next++, "gamma");
  if (beta) op.params.emplace_back(next++, "beta");
}

Lowering lower_softmax(const LowerContext& ctx, bool log) {
  const Shape& shape = ctx.inputs[0].shape;
  const int axis = normalize_axis(ctx.node.attrs.as<SoftmaxAttrs>().axis,
                                  static_cast<int>(shape.size()), ctx.node.op->name);
  const ops::AxisSplit s = ops::split_at_axis(shape, axis);
  RowOp op;
  op.name = ctx.node.op->name;
  op.stats = RowStats::softmax;
  op.rows = static_cast<uint64_t>(s.outer * s.inner);
  op.n = static_cast<uint64_t>(s.n);
  op.contiguous = s.inner == 1;
  const std::string N = ulit(op.n), I = ulit(s.inner), NI = ulit(s.n * s.inner);
  if (s.inner == 1) {
    op.elem = "r * " + N + " + j";
    op.row_of = "e / " + N;
    op.col_of = "e % " + N;
  } else {
    op.elem = "(r / " + I + ") * " + NI + " + j * " + I + " + r % " + I;
    op.row_of = "(e / " + NI + ") * " + I + " + e % " + I;
    op.col_of = "(e / " + I + ") % " + N;
  }
  op.epilogue = log ? "  return (x - a) - log(b);\n" : "  return exp(x - a) / b;\n";
  return nn_lowering::lower_rows(ctx, op);
}

// Rows over the trailing `dims` axes of input 0, normalized by `stats`, then scaled and shifted.
Lowering lower_normalized_rows(const LowerContext& ctx, const char* name, RowStats stats,
                               double eps, int64_t dims, bool gamma, bool beta) {
  const TensorType& x = ctx.inputs[0];
  RowOp op;
  op.name = name;
  op.stats = stats;
  op.eps = round_to_dtype(eps, x.dtype);
  contiguous_rows(op, static_cast<uint64_t>(x.numel()),
                  static_cast<uint64_t>(numel(std::span(x.shape).last(dims))));
  affine_params(op, gamma, beta);
  op.epilogue = affine_epilogue(gamma, beta, "j");
  return nn_lowering::lower_rows(ctx, op);
}

Lowering lower_layer_norm(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<LayerNormAttrs>();
  return lower_normalized_rows(ctx, "layer_norm", RowStats::centered, a.eps, a.normalized_dims,
                               a.has_gamma, a.has_beta);
}

Lowering lower_rms_norm(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<RmsNormAttrs>();
  return lower_normalized_rows(ctx, "rms_norm", RowStats::rms, a.eps, a.normalized_dims,
                               a.has_gamma, false);
}

// x [N, C, spatial...] as its batch, channels and spatial size.
struct Channels {
  uint64_t batch = 1, channels = 1, spatial = 1;
  explicit Channels(const TensorType& x) {
    batch = static_cast<uint64_t>(x.shape[0]);
    channels = static_cast<uint64_t>(x.shape[1]);
    for (size_t i = 2; i < x.shape.size(); ++i) spatial *= static_cast<uint64_t>(x.shape[i]);
  }
};

// One row per (sample, group): a contiguous block of C/groups channels.
Lowering lower_group_norm(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<GroupNormAttrs>();
  const TensorType& x = ctx.inputs[0];
  const Channels c(x);
  const auto groups = static_cast<uint64_t>(a.groups);
  const uint64_t per_group = c.channels / groups;
  RowOp op;
  op.name = "group_norm";
  op.stats = RowStats::centered;
  op.eps = round_to_dtype(a.eps, x.dtype);
  contiguous_rows(op, static_cast<uint64_t>(x.numel()), per_group * c.spatial);
  affine_params(op, a.has_gamma, a.has_beta);
  const std::string channel =
      "(r % " + ulit(groups) + ") * " + ulit(per_group) + " + j / " + ulit(c.spatial);
  op.epilogue = affine_epilogue(a.has_gamma, a.has_beta, channel);
  return nn_lowering::lower_rows(ctx, op);
}

// Training: one row per channel, its elements the N runs of `spatial` contiguous values.
Lowering lower_batch_norm_training(const LowerContext& ctx, const BatchNormAttrs& a) {
  const TensorType& x = ctx.inputs[0];
  const Channels c(x);
  const std::string C = ulit(c.channels), SP = ulit(c.spatial), SPC = ulit(c.spatial * c.channels);
  RowOp op;
  op.name = "batch_norm";
  op.stats = RowStats::centered;
  op.eps = round_to_dtype(a.eps, x.dtype);
  op.rows = c.channels;
  op.n = c.batch * c.spatial;
  op.contiguous = c.spatial >= 16;
  if (c.spatial == 1) {
    op.elem = "j * " + C + " + r";
    op.row_of = "e % " + C;
    op.col_of = "e / " + C;
  } else {
    op.elem = "((j / " + SP + ") * " + C + " + r) * " + SP + " + j % " + SP;
    op.row_of = "(e / " + SP + ") % " + C;
    op.col_of = "(e / " + SPC + ") * " + SP + " + e % " + SP;
  }
  affine_params(op, a.has_gamma, a.has_beta);
  op.epilogue = affine_epilogue(a.has_gamma, a.has_beta, "r");
  return nn_lowering::lower_rows(ctx, op);
}

// Eval: the running statistics are operands, so each element maps on its own.
Lowering lower_batch_norm_eval(const LowerContext& ctx, const BatchNormAttrs& a) {
  const TensorType& x = ctx.inputs[0];
  const Channels c(x);
  std::vector<std::pair<int, std::string>> operands{{0, "x"}};
  int next = 1;
  if (a.has_gamma) operands.emplace_back(next++, "gamma");
  if (a.has_beta) operands.emplace_back(next++, "beta");
  operands.emplace_back(next++, "rmean");
  operands.emplace_back(next++, "rvar");
  std::string decl;
  Lowering low;
  std::vector<KernelBinding> bindings;
  for (size_t i = 0; i < operands.size(); ++i) {
    decl += glsl::buffer(static_cast<uint32_t>(i), ctx.inputs[operands[i].first].dtype,
                         operands[i].second, true);
    bindings.push_back({ArgRef::input(operands[i].first), false});
  }
  decl += glsl::buffer(static_cast<uint32_t>(operands.size()), ctx.node.type.dtype, "out", false);
  bindings.push_back({ArgRef::output(), true});
  std::string body = "  uint c = (i / " + ulit(c.spatial) + ") % " + ulit(c.channels) + ";\n";
  body += "  float y = (x_ld(i) - rmean_ld(c)) * (1.0 / sqrt(rvar_ld(c) + " +
          glsl::float_literal(round_to_dtype(a.eps, x.dtype)) + "));\n";
  if (a.has_gamma) body += "  y *= gamma_ld(c);\n";
  if (a.has_beta) body += "  y += beta_ld(c);\n";
  body += "  out_st(i, y);\n";
  const auto n = static_cast<uint64_t>(x.numel());
  low.launches.push_back(
      glsl::elementwise_launch("batch_norm_eval", decl, body, n, ctx.device, std::move(bindings)));
  return low;
}

Lowering lower_batch_norm(const LowerContext& ctx) {
  glsl::require_storage(ctx);
  const auto& a = ctx.node.attrs.as<BatchNormAttrs>();
  return a.training ? lower_batch_norm_training(ctx, a) : lower_batch_norm_eval(ctx, a);
}

// random_bits (src/ir/random.h) on (lo, hi) pairs of 32-bit words, so that devices without
// 64-bit integers compute the same mask.
const char* kRandomBits = R"(
uvec2 mn_mul64(uvec2 a, uvec2 b) {
  uint hi, lo;
  umulExtended(a.x, b.x, hi, lo);
  return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}
// z ^ (z >> s) for 0 < s < 32, and for s = 32 + t with 0 < t < 32.
uvec2 mn_xorshift(uvec2 z, uint s) {
  return uvec2(z.x ^ ((z.x >> s) | (z.y << (32u - s))), z.y ^ (z.y >> s));
}
uvec2 mn_xorshift_high(uvec2 z, uint t) { return uvec2(z.x ^ (z.y >> t), z.y); }
// The top 24 bits of random_bits(seed, i), given base = seed * 0x9e3779b97f4a7c15 + 0x632be59bd9b4e019.
uint mn_random24(uvec2 base, uint i) {
  uint carry;
  uint lo = uaddCarry(base.x, i, carry);
  uvec2 z = uvec2(lo, base.y + carry);
  z = mn_mul64(mn_xorshift(z, 30u), uvec2(0x1ce4e5b9u, 0xbf58476du));
  z = mn_mul64(mn_xorshift(z, 27u), uvec2(0x133111ebu, 0x94d049bbu));
  z = mn_xorshift(z, 31u);
  z = mn_mul64(mn_xorshift_high(z, 1u), uvec2(0xed558ccdu, 0xff51afd7u));
  z = mn_xorshift_high(z, 1u);
  return z.y >> 8;
}
)";

// Element i is kept when its 24-bit uniform u satisfies u / 2^24 >= p, which for integers is
// u >= ceil(p 2^24): the threshold is exact, so the mask equals the reference's bit for bit.
// With a step input, the stream starts step·n further: base + step·n in 64 bits.
Lowering lower_dropout(const LowerContext& ctx) {
  glsl::require_storage(ctx);
  const auto& a = ctx.node.attrs.as<DropoutAttrs>();
  const uint64_t base = a.seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  const auto threshold = static_cast<uint64_t>(std::ceil(a.p * 16777216.0));
  const auto n = static_cast<uint64_t>(ctx.node.type.numel());
  const bool stepped = ctx.inputs.size() == 2;
  const int out_binding = stepped ? 2 : 1;
  std::string decl = glsl::buffer(0, ctx.inputs[0].dtype, "x", true);
  if (stepped) decl += glsl::buffer(1, ctx.inputs[1].dtype, "step", true);
  decl += glsl::buffer(out_binding, ctx.node.type.dtype, "out", false) + kRandomBits;
  std::string body =
      "  uvec2 base = uvec2(" + ulit(base & 0xffffffffu) + ", " + ulit(base >> 32) + ");\n";
  if (stepped) {
    body += "  uint off_hi, off_lo, carry;\n";
    body += "  umulExtended(uint(step_ldi(0u)), " + ulit(n) + ", off_hi, off_lo);\n";
    body += "  base.x = uaddCarry(base.x, off_lo, carry);\n";
    body += "  base.y += off_hi + carry;\n";
  }
  body += "  bool keep = mn_random24(base, i) >= " + ulit(threshold) + ";\n";
  body += "  out_st(i, keep ? x_ld(i) * " + glsl::float_literal(1.0 / (1.0 - a.p)) + " : 0.0);\n";
  std::vector<KernelBinding> args = {{ArgRef::input(0), false}};
  if (stepped) args.push_back(KernelBinding{ArgRef::input(1), false});
  args.push_back(KernelBinding{ArgRef::output(), true});
  KernelLaunch k = glsl::elementwise_launch("dropout", decl, body, n, ctx.device, args);
  Lowering low;
  low.launches.push_back(std::move(k));
  return low;
}

}  // namespace

void register_nn_lowerings(LoweringRegistry& r) {
  r.add("softmax", [](const LowerContext& ctx) { return lower_softmax(ctx, false); });
  r.add("log_softmax", [](const LowerContext& ctx) { return lower_softmax(ctx, true); });
  r.add("layer_norm", lower_layer_norm);
  r.add("rms_norm", lower_rms_norm);
  r.add("group_norm", lower_group_norm);
  r.add("batch_norm", lower_batch_norm);
  r.add("dropout", lower_dropout);
}

}  // namespace mn::codegen
