// GPU lowerings of the attention family: scaled_dot_product_attention as one kernel (a
// workgroup per query row: blocks of keys scored by the lanes, an online softmax, the weighted
// sum of V accumulated per output column), and rope / rope_backward as pointwise rotations.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "ir/ops/attention.h"
#include "ir/ops/common.h"

namespace mn::codegen {

namespace {

std::string u32(uint64_t v) { return std::to_string(v) + "u"; }

Shape pad_to(const Shape& s, size_t rank) {
  Shape p(rank - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  return p;
}
Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 3); }

// The operands padded to a common rank R >= 3 and the sizes the kernel bakes in (the op's
// inference has validated them).
struct AttentionShape {
  size_t rank = 3;
  Shape q, k, v, mask, batch, scores;
  uint64_t hq = 1, hkv = 1, lq = 1, lk = 1, d = 1, dv = 1;

  AttentionShape(std::span<const TensorType> in, bool has_mask) {
    for (int i = 0; i < 3; ++i) rank = std::max(rank, in[i].shape.size());
    q = pad_to(in[0].shape, rank);
    k = pad_to(in[1].shape, rank);
    v = pad_to(in[2].shape, rank);
    const size_t R = rank;
    hq = q[R - 3], lq = q[R - 2], d = q[R - 1];
    hkv = k[R - 3], lk = k[R - 2], dv = v[R - 1];
    batch = broadcast_shapes(broadcast_shapes(leading(q), leading(k)), leading(v));
    scores = batch;
    scores.insert(scores.end(),
                  {static_cast<int64_t>(hq), static_cast<int64_t>(lq), static_cast<int64_t>(lk)});
    if (has_mask) mask = pad_to(in[3].shape, rank);
  }
  uint64_t rows() const { return static_cast<uint64_t>(numel(batch)) * hq * lq; }
};

Lowering lower_attention(const LowerContext& ctx) {
  glsl::require_storage(ctx);
  const auto& a = ctx.node.attrs.as<AttentionAttrs>();
  const AttentionShape g(ctx.inputs, a.has_mask);
  if (ctx.node.type.numel() == 0) return {};
  const size_t R = g.rank;
  const DeviceTraits& dev = ctx.device;
  const uint32_t most =
      std::bit_floor(std::clamp<uint32_t>(dev.max_workgroup_invocations, 32, 256));
  // One key per lane per block; wide value rows take more lanes so that each keeps at most 8
  // output columns in registers.
  uint32_t lanes = g.lk <= 32 ? 32 : 64;
  lanes = std::min(most, std::max(lanes, std::bit_ceil(static_cast<uint32_t>((g.dv + 7) / 8))));
  const uint64_t cols = (g.dv + lanes - 1) / lanes;
  // q's row in shared memory when it fits beside the block buffers.
  const bool q_shared = g.d > 0 && (g.d + 2 * lanes) * sizeof(float) <= dev.max_shared_bytes;
  const std::string L = u32(lanes);

  std::string s = glsl::header();
  s += glsl::buffer(0, ctx.inputs[0].dtype, "q", true);
  s += glsl::buffer(1, ctx.inputs[1].dtype, "k", true);
  s += glsl::buffer(2, ctx.inputs[2].dtype, "v", true);
  uint32_t next = 3;
  if (a.has_mask) s += glsl::buffer(next++, ctx.inputs[3].dtype, "mask", true);
  s += glsl::buffer(next, ctx.node.type.dtype, "out", false);
  s += "const uint HQ = " + u32(g.hq) + ", LQ = " + u32(g.lq) + ", D = " + u32(g.d) +
       ", LK = " + u32(g.lk) + ", DV = " + u32(g.dv) + ", GROUP = " + u32(g.hq / g.hkv) + ";\n";
  s += "float mn_inf() { return uintBitsToFloat(0x7f800000u); }\n";
  s += "shared float p_sh[" + L + "];\nshared float red[" + L + "];\n";
  if (q_shared) s += "shared float q_sh[" + u32(g.d) + "];\n";
  // Workgroup sum and max (the max ignores NaN as the reference's std::max does).
  for (const auto& [name, comb] :
       {std::pair{"wg_sum", "x + y"}, std::pair{"wg_max", "y > x ? y : x"}}) {
    s += std::string("float ") + name + "(float v) {\n  uint t = gl_LocalInvocationID.x;\n";
    s += "  red[t] = v;\n  barrier();\n";
    s += "  for (uint h = " + u32(lanes / 2) + "; h > 0u; h >>= 1) {\n";
    s += "    if (t < h) { float x = red[t], y = red[t + h]; red[t] = " + std::string(comb) +
         "; }\n    barrier();\n  }\n  float r = red[0];\n  barrier();\n  return r;\n}\n";
  }

  s += "void main() {\n";
  s += "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (g >= " + u32(g.rows()) + ") return;\n";
  s += "  uint lane = gl_LocalInvocationID.x;\n";
  s += "  uint i = g % LQ, h = (g / LQ) % HQ, b = g / (LQ * HQ);\n  uint hk = h / GROUP;\n";
  s += glsl::unravel(g.batch, "b", "c");
  const auto batch_offset = [&](const Shape& padded, uint64_t block) {
    return "(" + glsl::broadcast_offset(leading(padded), g.batch, "c") + ") * " + u32(block);
  };
  s += "  uint qb = " + batch_offset(g.q, g.hq * g.lq * g.d) + " + (h * LQ + i) * D;\n";
  s += "  uint kb = " + batch_offset(g.k, g.hkv * g.lk * g.d) + " + hk * LK * D;\n";
  s += "  uint vb = " + batch_offset(g.v, g.hkv * g.lk * g.dv) + " + hk * LK * DV;\n";
  std::string mask_term;
  if (a.has_mask) {
    // The mask's offset at key 0 from the score coordinates (batch, h, i, 0), and its key stride.
    s += "  uint c" + std::to_string(R - 3) + " = h, c" + std::to_string(R - 2) + " = i, c" +
         std::to_string(R - 1) + " = 0u;\n";
    s += "  uint mb = " + glsl::broadcast_offset(g.mask, g.scores, "c") + ";\n";
    mask_term = " + mask_ld(mb + j * " + u32(g.mask[R - 1] == 1 ? 0 : 1) + ")";
  }
  std::string q_at = "q_ld(qb + e)";
  if (q_shared) {
    s += "  for (uint e = lane; e < D; e += " + L + ") q_sh[e] = q_ld(qb + e);\n  barrier();\n";
    q_at = "q_sh[e]";
  }
  s += std::string("  uint visible = ") + (a.causal ? "min(LK, i + 1u)" : "LK") + ";\n";
  s += "  float m = -mn_inf(), l = 0.0;\n  float acc[" + u32(cols) + "];\n";
  s += "  for (uint t = 0u; t < " + u32(cols) + "; ++t) acc[t] = 0.0;\n";
  s += "  for (uint j0 = 0u; j0 < visible; j0 += " + L + ") {\n";
  s += "    uint j = j0 + lane;\n    float sc = -mn_inf();\n";
  s += "    if (j < visible) {\n      float dot = 0.0;\n";
  s += "      for (uint e = 0u; e < D; ++e) dot += " + q_at + " * k_ld(kb + j * D + e);\n";
  // An explicit scale as the dtype holds it; the default divides by sqrt(D) as the reference.
  const std::string scaled =
      a.scale > 0.0 ? "dot * " + glsl::float_literal(round_to_dtype(a.scale, ctx.node.type.dtype))
                    : "dot / " + glsl::float_literal(std::sqrt(static_cast<double>(g.d)));
  s += "      sc = " + scaled + mask_term + ";\n    }\n";
  s += "    float bm = wg_max(sc);\n    float mn = bm > m ? bm : m;\n";
  // Masked keys (-inf) weigh 0; a row with every key masked ends as 0 / 0 = NaN, as the
  // reference's exp(-inf - -inf).
  s += "    float p = sc == -mn_inf() ? 0.0 : exp(sc - mn);\n";
  s += "    float alpha = m == -mn_inf() ? 0.0 : exp(m - mn);\n";
  s += "    p_sh[lane] = p;\n    l = l * alpha + wg_sum(p);\n    m = mn;\n";
  s += "    uint cnt = min(" + L + ", visible - j0);\n";
  s += "    for (uint t = 0u; t < " + u32(cols) + "; ++t) {\n";
  s += "      uint e = lane + t * " + L + ";\n      if (e < DV) {\n";
  s += "        float o = acc[t] * alpha;\n";
  s += "        for (uint u = 0u; u < cnt; ++u) o += p_sh[u] * v_ld(vb + (j0 + u) * DV + e);\n";
  s += "        acc[t] = o;\n      }\n    }\n    barrier();\n  }\n";
  // No keys at all: the reference's sum over nothing is 0.
  s += "  for (uint t = 0u; t < " + u32(cols) + "; ++t) {\n";
  s += "    uint e = lane + t * " + L + ";\n";
  s += "    if (e < DV) out_st(g * DV + e, visible == 0u ? 0.0 : acc[t] / l);\n  }\n}\n";

  KernelLaunch k;
  k.name = "attention";
  k.glsl = std::move(s);
  k.workgroup = {lanes, 1, 1};
  k.groups = glsl::linear_grid(g.rows() * lanes, dev, lanes).groups;
  for (uint32_t i = 0; i < next; ++i)
    k.bindings.push_back({ArgRef::input(static_cast<int>(i)), false});
  k.bindings.push_back({ArgRef::output(), true});
  Lowering low;
  low.launches.push_back(std::move(k));
  return low;
}

// cos and sin of 2 pi (p w) for an integer position p < 2^24 and w = hi + lo (the frequency in
// turns): the product splits exactly (Dekker), so its fraction of a turn keeps full f32
// accuracy for large positions. `precise` keeps compilers from fusing or reassociating it.
const char* kTurn = R"(
void mn_turn(float p, float hi, float lo, out float c, out float s) {
  precise float prod = p * hi;
  precise float ca = 4097.0 * p;
  precise float ph = ca - (ca - p);
  precise float pl = p - ph;
  precise float cb = 4097.0 * hi;
  precise float hh = cb - (cb - hi);
  precise float hl = hi - hh;
  precise float err = ((ph * hh - prod) + ph * hl + pl * hh) + pl * hl;
  precise float t = (prod - round(prod)) + (err + p * lo);
  precise float r = t - round(t);
  precise float angle = r * 6.28318530717958647;
  c = cos(angle);
  s = sin(angle);
}
)";

// One thread per (row, pair i): y_i = x_i c - x_{i+D/2} s, y_{i+D/2} = x_{i+D/2} c + x_i s, with
// s negated for rope_backward.
Lowering lower_rope(const LowerContext& ctx, bool backward) {
  glsl::require_storage(ctx);
  const auto& a = ctx.node.attrs.as<RopeAttrs>();
  const Shape& shape = ctx.inputs[0].shape;
  const auto dim = static_cast<uint64_t>(shape.back());
  const auto length = static_cast<uint64_t>(shape[shape.size() - 2]);
  const uint64_t half = dim / 2;
  const uint64_t pairs = static_cast<uint64_t>(ctx.inputs[0].numel()) / 2;
  if (pairs == 0) return {};

  // The reference's frequencies in double, as turns per position split into two floats.
  std::string hi = "const float W_HI[" + u32(half) + "] = float[](";
  std::string lo = "const float W_LO[" + u32(half) + "] = float[](";
  for (uint64_t i = 0; i < half; ++i) {
    const double inv_freq =
        1.0 / std::pow(a.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
    const double w = inv_freq / (2.0 * std::numbers::pi);
    const auto w_hi = static_cast<float>(w);
    hi += (i ? ", " : "") + glsl::float_literal(w_hi);
    lo += (i ? ", " : "") + glsl::float_literal(w - static_cast<double>(w_hi));
  }
  std::string decl = glsl::buffer(0, ctx.inputs[0].dtype, "x", true) +
                     glsl::buffer(1, ctx.node.type.dtype, "out", false) + hi + ");\n" + lo +
                     ");\n" + kTurn;
  std::string body = "  uint row = i / " + u32(half) + ", k = i % " + u32(half) + ";\n";
  // Positions are exact in f32 below 2^24; the offset can be negative.
  body += "  float p = float(row % " + u32(length) + ") + " +
          glsl::float_literal(static_cast<double>(a.position_offset)) + ";\n";
  body += "  float c, s;\n  mn_turn(p, W_HI[k], W_LO[k], c, s);\n";
  if (backward) body += "  s = -s;\n";
  body += "  uint e1 = row * " + u32(dim) + " + k, e2 = e1 + " + u32(half) + ";\n";
  body += "  float x1 = x_ld(e1), x2 = x_ld(e2);\n";
  body += "  out_st(e1, x1 * c - x2 * s);\n  out_st(e2, x2 * c + x1 * s);\n";
  const glsl::Linear grid = glsl::linear_grid(pairs, ctx.device);
  KernelLaunch k;
  k.name = backward ? "rope_backward" : "rope";
  k.glsl = glsl::elementwise_kernel(decl, body, pairs);
  k.workgroup = {grid.local, 1, 1};
  k.groups = grid.groups;
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::output(), true}};
  Lowering low;
  low.launches.push_back(std::move(k));
  return low;
}

}  // namespace

void register_attention_lowerings(LoweringRegistry& r) {
  r.add("scaled_dot_product_attention", lower_attention);
  r.add("rope", [](const LowerContext& ctx) { return lower_rope(ctx, false); });
  r.add("rope_backward", [](const LowerContext& ctx) { return lower_rope(ctx, true); });
}

}  // namespace mn::codegen
