// GPU lowering of scaled_dot_product_attention: one kernel with an online softmax over blocks
// of keys (causal and additive masks, grouped-query heads, broadcast batch axes).
//
// Two forms. Tiled: a workgroup holds a tile of query rows of one head; each block of keys and
// values is loaded once into shared memory for all of them, 16 lanes per query row score the
// block's keys and accumulate the row's output columns. Per row: a workgroup per query row (or
// per range of its keys, split over several workgroups when the rows are few); it serves short
// queries (decoding) and heads too wide for the tile's shared memory. On devices with subgroup
// shuffles and heads of 4·2^n elements it runs as streams of lanes, each keeping its own online
// softmax without a barrier (stream_row_kernel); otherwise the lanes score one key each. On
// devices with tensor cores, prompts may take the cooperative-matrix kernel instead
// (takes_coop, lower_attention_coop.cpp).
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <optional>

#include "codegen/attention_shape.h"
#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_attention.h"
#include "codegen/lower_attention_tensor.h"
#include "codegen/lower_families.h"
#include "codegen/rope_load.h"
#include "ir/ops/attention.h"
#include "ir/ops/cache.h"
#include "ir/ops/common.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

using attention_lowering::AttentionShape;
using attention_lowering::declarations;
using attention_lowering::head_offsets;
using attention_lowering::saved_lse_binding;
using attention_lowering::saved_lse_store;
using attention_lowering::score_expr;
using attention_lowering::tile_reach;
using attention_lowering::visible_expr;

uint32_t most_lanes(const DeviceTraits& d) {
  return std::bit_floor(std::clamp<uint32_t>(d.max_workgroup_invocations, 32, 256));
}

// ---- tiled: a tile of query rows per workgroup ----

constexpr uint32_t kRowLanes = 16;

struct Tiling {
  uint32_t rows = 16;  // query rows per workgroup
  uint32_t keys = 64;  // keys per block
  uint32_t cols = 1;   // output columns per lane
};

std::optional<Tiling> tiling_for(const AttentionShape& g, const DeviceTraits& d) {
  if (g.lq < 8) return std::nullopt;  // decoding: most of a tile would idle
  Tiling t;
  t.rows = std::min<uint32_t>(16, most_lanes(d) / kRowLanes);
  t.cols = static_cast<uint32_t>((g.dv + kRowLanes - 1) / kRowLanes);
  if (t.rows < 4 || t.cols > 16) return std::nullopt;
  for (uint32_t keys : {64u, 32u, 16u}) {
    // Rows of q, k and p padded by one float (lanes reading a column hit distinct banks), and
    // a word per row for the rows' reach (tile_reach).
    const uint64_t floats =
        t.rows * (g.d + 1) + keys * (g.d + 1) + keys * g.dv + t.rows * (keys + 1) + t.rows;
    if (floats * sizeof(float) <= d.max_shared_bytes) {
      t.keys = keys;
      return t;
    }
  }
  return std::nullopt;
}

KernelLaunch tiled_kernel(const LowerContext& ctx, const AttentionShape& g, const Tiling& t) {
  const AttentionAttrs& a = g.attrs;
  KernelLaunch k;
  std::string s = declarations(ctx, g, a.has_mask, k.bindings);
  s += saved_lse_binding(ctx, k);  // after the operands' and output 0's bindings
  const uint32_t threads = t.rows * kRowLanes;
  const uint64_t tiles = (g.lq + t.rows - 1) / t.rows;
  const std::string BQ = ulit(t.rows), BK = ulit(t.keys), NT = ulit(threads), LR = ulit(kRowLanes);
  const std::string QS = ulit(g.d + 1), PS = ulit(t.keys + 1), COLS = ulit(t.cols);
  const std::string KPL = ulit(t.keys / kRowLanes);
  s += "shared float q_sh[" + ulit(t.rows * (g.d + 1)) + "];\n";
  s += "shared float k_sh[" + ulit(t.keys * (g.d + 1)) + "];\n";
  s += "shared float v_sh[" + ulit(std::max<uint64_t>(t.keys * g.dv, 1)) + "];\n";
  s += "shared float p_sh[" + ulit(t.rows * (t.keys + 1)) + "];\n";
  if (g.has_positions) s += "shared uint reach_sh[" + ulit(t.rows) + "];\n";
  s += "void main() {\n";
  s += "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (g >= " + ulit(g.heads() * tiles) + ") return;\n";
  s += "  uint tid = gl_LocalInvocationID.x, rr = tid / " + LR + ", t = tid % " + LR + ";\n";
  s += "  uint bh = g / " + ulit(tiles) + ", i0 = (g % " + ulit(tiles) + ") * " + BQ + ";\n";
  s += "  uint h = bh % HQ, b = bh / HQ;\n";
  s += "  uint i = i0 + rr;\n  bool valid = i < LQ;\n";
  s += head_offsets(g, a.has_mask, "(valid ? i : 0u)");
  s += "  for (uint x = tid; x < " + ulit(t.rows * g.d) + "; x += " + NT + ") {\n";
  s += "    uint r = x / D, e = x % D;\n";
  s += "    q_sh[r * " + QS + " + e] = i0 + r < LQ ? q_ld(qb + (i0 + r) * D + e) : 0.0;\n  }\n";
  s += "  uint visible = valid ? " + visible_expr(g, "i") + " : 0u;\n";
  s += tile_reach(g, BQ);
  s += "  float m = -mn_inf(), l = 0.0;\n  float acc[" + COLS + "];\n";
  s += "  for (uint c = 0u; c < " + COLS + "; ++c) acc[c] = 0.0;\n";
  s += "  for (uint j0 = 0u; j0 < reach; j0 += " + BK + ") {\n";
  s += "    barrier();\n";  // the previous block's readers are done (and q_sh is written)
  s += "    for (uint x = tid; x < " + ulit(t.keys * g.d) + "; x += " + NT + ") {\n";
  s += "      uint j = x / D, e = x % D;\n";
  s += "      k_sh[j * " + QS + " + e] = j0 + j < LK ? k_ld(kb + (j0 + j) * D + e) : 0.0;\n    }\n";
  s += "    for (uint x = tid; x < " + ulit(t.keys * g.dv) + "; x += " + NT + ") {\n";
  s += "      uint j = x / DV;\n";
  s += "      v_sh[x] = j0 + j < LK ? v_ld(vb + (j0 + j) * DV + x % DV) : 0.0;\n    }\n";
  s += "    barrier();\n";
  s += "    float sc[" + KPL + "];\n";
  s += "    for (uint kk = 0u; kk < " + KPL + "; ++kk) {\n";
  s += "      uint j = t + kk * " + LR + ", jj = j0 + j;\n      float v = -mn_inf();\n";
  s += "      if (jj < visible) {\n        float dot = 0.0;\n";
  s += "        for (uint e = 0u; e < D; ++e) dot += q_sh[rr * " + QS + " + e] * k_sh[j * " + QS +
       " + e];\n";
  s += "        v = " + score_expr(ctx, g, a, "jj") + ";\n      }\n";
  s += "      sc[kk] = v;\n      p_sh[rr * " + PS + " + j] = v;\n    }\n";
  s += "    barrier();\n";
  // The row's block max (NaN ignored as by std::max), then the rescaling of what came before.
  s += "    float bm = -mn_inf();\n";
  s += "    for (uint j = 0u; j < " + BK + "; ++j) { float v = p_sh[rr * " + PS +
       " + j]; bm = v > bm ? v : bm; }\n";
  s += "    float mn = bm > m ? bm : m;\n";
  s += "    float alpha = m == -mn_inf() ? 0.0 : exp(m - mn);\n";
  s += "    barrier();\n";
  // Masked keys (-inf) weigh 0; a row with every key masked ends as 0 / 0 = NaN, as the
  // reference's exp(-inf - -inf).
  s += "    for (uint kk = 0u; kk < " + KPL + "; ++kk)\n";
  s += "      p_sh[rr * " + PS + " + t + kk * " + LR +
       "] = sc[kk] == -mn_inf() ? 0.0 : exp(sc[kk] - mn);\n";
  s += "    barrier();\n";
  s += "    for (uint c = 0u; c < " + COLS + "; ++c) acc[c] *= alpha;\n";
  s += "    float rs = 0.0;\n    uint cnt = min(" + BK + ", reach - j0);\n";
  s += "    for (uint j = 0u; j < cnt; ++j) {\n";
  s += "      float p = p_sh[rr * " + PS + " + j];\n      rs += p;\n";
  s += "      for (uint c = 0u; c < " + COLS + "; ++c) {\n";
  s += "        uint e = t + c * " + LR + ";\n";
  s += "        if (e < DV) acc[c] += p * v_sh[j * DV + e];\n      }\n    }\n";
  s += "    l = l * alpha + rs;\n    m = mn;\n  }\n";
  // No keys at all: the reference's sum over nothing is 0.
  s += "  if (!valid) return;\n";
  s += "  if (t == 0u) {\n" + saved_lse_store(ctx, "    ", "bh * LQ + i", "m", "l") + "  }\n";
  s += "  for (uint c = 0u; c < " + COLS + "; ++c) {\n    uint e = t + c * " + LR + ";\n";
  s += "    if (e < DV) out_st((bh * LQ + i) * DV + e, visible == 0u ? 0.0 : acc[c] / l);\n";
  s += "  }\n}\n";
  k.name = "attention_tiled";
  k.glsl = std::move(s);
  k.workgroup = {threads, 1, 1};
  k.groups = glsl::linear_grid(g.heads() * tiles * threads, ctx.device, threads).groups;
  return k;
}

// ---- register tiles: 32 query rows and 64 keys a block, 4 × 4 scores per lane ----
//
// For prompts: the tiled kernel above reads two shared floats per multiply-add. Here each of
// 128 lanes (8 row groups × 16 key groups) holds the scores of 4 rows × 4 keys and, per 64
// value columns, the output of 4 rows × 4 columns, reading one vec4 of each operand per 16
// multiply-adds. The query tile and each key block are staged head-dimension major (rows and
// keys in vec4s); the block's probabilities then take the keys' place. A row's block maximum
// meets in shared memory; its sum stays per lane until the end (every lane of a row rescales by
// the same factor).

constexpr uint32_t kRegRows = 32, kRegKeys = 64, kRegLanes = 128;

struct RegisterTiling {
  uint64_t qr4 = 0, kr4 = 0, vr4 = 0;  // vec4s per staged row, one of pad each
  uint64_t quads_v = 0;                // output vec4s per lane and row: DV / 64

  uint64_t kt_vec4s(const AttentionShape& g) const {
    return std::max(g.d * kr4, uint64_t{kRegKeys} * qr4);  // keys, then probabilities
  }
  uint64_t shared_bytes(const AttentionShape& g) const {
    // The staged rows, the row reductions, the rows' reach (tile_reach).
    return (g.d * qr4 + kt_vec4s(g) + kRegKeys * vr4) * 16 + kRegRows * 17 * 4 + kRegRows * 4;
  }
};

std::optional<RegisterTiling> register_tiling_for(const AttentionShape& g, const DeviceTraits& d) {
  if (g.lq < kRegRows || g.d % 4 != 0 || g.dv % 64 != 0) return std::nullopt;
  if (d.max_workgroup_invocations < kRegLanes) return std::nullopt;
  RegisterTiling t;
  t.qr4 = kRegRows / 4 + 1;
  t.kr4 = kRegKeys / 4 + 1;
  t.vr4 = g.dv / 4 + 1;
  t.quads_v = g.dv / 64;
  if (t.shared_bytes(g) > d.max_shared_bytes) return std::nullopt;
  return t;
}

// Stages the query tile into `dst`, head-dimension major: element (row x, e) at
// dst[e * R4 + x / 4][x % 4]. Each lane reads four consecutive elements of a row.
std::string stage_transposed(const std::string& dst, const std::string& ld, const std::string& base,
                             uint64_t rows, const std::string& first, const std::string& limit,
                             const std::string& width, uint64_t r4) {
  const std::string R = ulit(rows);
  std::string s = "    for (uint x = tid; x < " + ulit(rows) + " * (" + width + " / 4u); x += " +
                  ulit(kRegLanes) + ") {\n";
  s += "      uint r = x % " + R + ", e = (x / " + R + ") * 4u, row = " + first + " + r;\n";
  s += "      bool in_range = row < " + limit + ";\n";
  s += "      for (uint c = 0u; c < 4u; ++c)\n";
  s += "        " + dst + "[(e + c) * " + ulit(r4) + " + r / 4u][r % 4u] = in_range ? " + ld + "(" +
       base + " + row * " + width + " + e + c) : 0.0;\n";
  s += "    }\n";
  return s;
}

// A key block's keys and values in registers, the keys as quads along the head dimension (lane
// x: key x % 64, elements 4·(x / 64) on), the values as quads along a row. The block after the
// current one is loaded while the current one's products run: a workgroup of four warps cannot
// hide the loads' latency by number, and staging them in place stalled every block.
struct BlockQuads {
  uint64_t k_quads, v_quads, k_per_lane, v_per_lane;
  explicit BlockQuads(const AttentionShape& g)
      : k_quads(kRegKeys * g.d / 4),
        v_quads(kRegKeys * g.dv / 4),
        k_per_lane((k_quads + kRegLanes - 1) / kRegLanes),
        v_per_lane((v_quads + kRegLanes - 1) / kRegLanes) {}
};

// GLSL statements `body(i)` for i = 0 .. count - 1 with i a literal: register arrays indexed
// by a literal stay registers (a loop variable the compiler does not unroll would put them in
// local memory).
std::string unrolled(uint64_t count, const std::function<std::string(const std::string&)>& body) {
  std::string s;
  for (uint64_t i = 0; i < count; ++i) s += body(std::to_string(i));
  return s;
}

std::string block_loads(const AttentionShape& g, const BlockQuads& b) {
  const std::string L = ulit(kRegLanes), KEYS = ulit(kRegKeys), VQ = ulit(g.dv / 4);
  std::string s = unrolled(b.k_per_lane, [&](const std::string& n) {
    // Loaded at clamped indices, then selected: loads inside a branch may wait out their
    // latency one after another.
    std::string x = "    {\n      uint x = tid + " + n + "u * " + L + ", r = x % " + KEYS +
                    ", e = (x / " + KEYS + ") * 4u, row = jn + r;\n";
    x += "      uint at = kb + min(row, LK - 1u) * D + min(e, D - 4u);\n";
    x += "      vec4 kv = vec4(k_ld(at), k_ld(at + 1u), k_ld(at + 2u), k_ld(at + 3u));\n";
    x += "      kreg[" + n + "] = x < " + ulit(b.k_quads) +
         " && row < LK ? kv : vec4(0.0);\n    }\n";
    return x;
  });
  s += unrolled(b.v_per_lane, [&](const std::string& n) {
    std::string x = "    {\n      uint x = tid + " + n + "u * " + L + ", row = jn + x / " + VQ +
                    ", at = vb + min(row, LK - 1u) * DV + (x % " + VQ + ") * 4u;\n";
    x += "      vec4 vv = vec4(v_ld(at), v_ld(at + 1u), v_ld(at + 2u), v_ld(at + 3u));\n";
    x += "      vreg[" + n + "] = row < LK ? vv : vec4(0.0);\n    }\n";
    return x;
  });
  return s;
}

std::string block_stores(const AttentionShape& g, const RegisterTiling& t, const BlockQuads& b) {
  const std::string L = ulit(kRegLanes), KEYS = ulit(kRegKeys), VQ = ulit(g.dv / 4);
  std::string s = unrolled(b.k_per_lane, [&](const std::string& n) {
    std::string x = "    {\n      uint x = tid + " + n + "u * " + L + ", r = x % " + KEYS +
                    ", e = (x / " + KEYS + ") * 4u;\n";
    x += "      if (x < " + ulit(b.k_quads) + ") {\n";
    x += unrolled(4, [&](const std::string& c) {
      return "        kt[(e + " + c + "u) * " + ulit(t.kr4) + " + r / 4u][r % 4u] = kreg[" + n +
             "][" + c + "];\n";
    });
    return x + "      }\n    }\n";
  });
  s += unrolled(b.v_per_lane, [&](const std::string& n) {
    return "    {\n      uint x = tid + " + n + "u * " + L + ";\n      vs[(x / " + VQ + ") * " +
           ulit(t.vr4) + " + x % " + VQ + "] = vreg[" + n + "];\n    }\n";
  });
  return s;
}

// Per row of the lane: the scores of its four keys scaled, masked and hidden past the row's
// visible keys; each row's maximum of them into red.
std::string register_scores(const LowerContext& ctx, const AttentionShape& g) {
  const AttentionAttrs& a = g.attrs;
  return unrolled(4, [&](const std::string& r) {
    std::string s = "    {\n      uint i = i0 + ty * 4u + " + r + "u;\n";
    if (a.has_mask) {
      const size_t R = g.rank;
      const uint64_t row_stride = g.mask[R - 2] == 1 ? 0 : static_cast<uint64_t>(g.mask[R - 1]);
      s += "      uint mbr = mb + min(i, LQ - 1u) * " + ulit(row_stride) + ";\n";
    }
    s += "      float bm = -mn_inf();\n";
    s += unrolled(4, [&](const std::string& c) {
      std::string x = "      {\n        uint jj = j0 + tx * 4u + " + c + "u;\n        float dot = s" +
                      r + "[" + c + "];\n";
      x += "        float v = jj < vis" + r + " ? " + score_expr(ctx, g, a, "jj", "mbr") +
           " : -mn_inf();\n";
      x += "        s" + r + "[" + c + "] = v;\n        bm = v > bm ? v : bm;\n      }\n";
      return x;
    });
    s += "      red[(ty * 4u + " + r + "u) * 17u + tx] = bm;\n    }\n";
    return s;
  });
}

// The rows' block maxima from red, the rescaling of what came before, the probabilities (into
// kt, head-dimension major no more: [key][row vec4]).
std::string register_probabilities(const RegisterTiling& t) {
  std::string s = unrolled(4, [&](const std::string& r) {
    std::string x = "    {\n      float bm = -mn_inf();\n";
    x += "      for (uint x = 0u; x < 16u; ++x) { float v = red[(ty * 4u + " + r +
         "u) * 17u + x]; bm = v > bm ? v : bm; }\n";
    x += "      float mx = bm > m" + r + " ? bm : m" + r + ";\n";
    x += "      float alpha = m" + r + " == -mn_inf() ? 0.0 : exp(m" + r + " - mx);\n";
    x += "      m" + r + " = mx;\n      l" + r + " *= alpha;\n";
    x += unrolled(t.quads_v, [&](const std::string& q) {
      return "      acc" + r + "_" + q + " *= alpha;\n";
    });
    x += unrolled(4, [&](const std::string& c) {
      const std::string sc = "s" + r + "[" + c + "]";
      return "      " + sc + " = " + sc + " == -mn_inf() ? 0.0 : exp(" + sc + " - mx);\n      l" +
             r + " += " + sc + ";\n";
    });
    return x + "    }\n";
  });
  s += unrolled(4, [&](const std::string& c) {
    return "    kt[(tx * 4u + " + c + "u) * " + ulit(t.qr4) + " + ty] = vec4(s0[" + c + "], s1[" +
           c + "], s2[" + c + "], s3[" + c + "]);\n";
  });
  return s;
}

KernelLaunch register_tiled_kernel(const LowerContext& ctx, const AttentionShape& g,
                                   const RegisterTiling& t) {
  const AttentionAttrs& a = g.attrs;
  KernelLaunch k;
  std::string s = declarations(ctx, g, a.has_mask, k.bindings);
  s += saved_lse_binding(ctx, k);  // after the operands' and output 0's bindings
  const uint64_t tiles = (g.lq + kRegRows - 1) / kRegRows;
  const std::string QR4 = ulit(t.qr4), KR4 = ulit(t.kr4), VR4 = ulit(t.vr4);
  const std::string BQ = ulit(kRegRows), BK = ulit(kRegKeys);
  s += "shared vec4 qt[" + ulit(g.d * t.qr4) + "];\n";
  s += "shared vec4 kt[" + ulit(t.kt_vec4s(g)) + "];\n";
  s += "shared vec4 vs[" + ulit(kRegKeys * t.vr4) + "];\n";
  s += "shared float red[" + ulit(kRegRows * 17) + "];\n";
  if (g.has_positions) s += "shared uint reach_sh[" + ulit(kRegRows) + "];\n";
  s += "void main() {\n";
  s += "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (g >= " + ulit(g.heads() * tiles) + ") return;\n";
  s += "  uint tid = gl_LocalInvocationID.x, tx = tid % 16u, ty = tid / 16u;\n";
  s += "  uint bh = g / " + ulit(tiles) + ", i0 = (g % " + ulit(tiles) + ") * " + BQ + ";\n";
  s += "  uint h = bh % HQ, b = bh / HQ;\n";
  s += head_offsets(g, a.has_mask, "0u");
  s += stage_transposed("qt", "q_ld", "qb", kRegRows, "i0", "LQ", "D", t.qr4);
  s += unrolled(4, [&](const std::string& r) {
    return "  uint vis" + r + " = i0 + ty * 4u + " + r + "u < LQ ? " +
           visible_expr(g, "(i0 + ty * 4u + " + r + "u)") + " : 0u;\n";
  });
  s += tile_reach(g, BQ);
  s += unrolled(4, [&](const std::string& r) {
    std::string x = "  float m" + r + " = -mn_inf(), l" + r + " = 0.0;\n";
    x += unrolled(t.quads_v, [&](const std::string& q) {
      return "  vec4 acc" + r + "_" + q + " = vec4(0.0);\n";
    });
    return x;
  });
  const BlockQuads quads(g);
  s += "  vec4 kreg[" + ulit(quads.k_per_lane) + "], vreg[" + ulit(quads.v_per_lane) + "];\n";
  s += "  uint jn = 0u;\n  if (reach > 0u) {\n" + block_loads(g, quads) + "  }\n";
  s += "  for (uint j0 = 0u; j0 < reach; j0 += " + BK + ") {\n";
  s += "    barrier();\n";  // the previous block's readers are done (and qt is written)
  s += block_stores(g, t, quads);
  s += "    barrier();\n";
  s += "    jn = j0 + " + BK + ";\n    if (jn < reach) {\n" + block_loads(g, quads) + "    }\n";
  s += "    vec4 s0 = vec4(0.0), s1 = vec4(0.0), s2 = vec4(0.0), s3 = vec4(0.0);\n";
  s += "    for (uint e = 0u; e < D; ++e) {\n";
  s += "      vec4 qv = qt[e * " + QR4 + " + ty], kv = kt[e * " + KR4 + " + tx];\n";
  s += "      s0 += qv.x * kv; s1 += qv.y * kv; s2 += qv.z * kv; s3 += qv.w * kv;\n";
  s += "    }\n";
  s += register_scores(ctx, g);
  s += "    barrier();\n";  // red is complete; every lane is past reading the keys
  s += register_probabilities(t);
  s += "    barrier();\n";
  s += "    uint cnt = min(" + BK + ", reach - j0);\n";
  s += "    for (uint j = 0u; j < cnt; ++j) {\n";
  s += "      vec4 p = kt[j * " + QR4 + " + ty];\n";
  s += unrolled(t.quads_v, [&](const std::string& q) {
    std::string x = "      {\n        vec4 vv = vs[j * " + VR4 + " + tx + " + q + "u * 16u];\n";
    x += "        acc0_" + q + " += p.x * vv; acc1_" + q + " += p.y * vv; acc2_" + q +
         " += p.z * vv; acc3_" + q + " += p.w * vv;\n      }\n";
    return x;
  });
  s += "    }\n  }\n";
  // The rows' sums over their 16 lanes.
  s += "  barrier();\n";
  s += unrolled(4, [&](const std::string& r) {
    return "  red[(ty * 4u + " + r + "u) * 17u + tx] = l" + r + ";\n";
  });
  s += "  barrier();\n";
  s += unrolled(4, [&](const std::string& r) {
    std::string x = "  if (i0 + ty * 4u + " + r + "u < LQ) {\n";
    x += "    uint i = i0 + ty * 4u + " + r + "u;\n    float sum = 0.0;\n";
    x += "    for (uint x = 0u; x < 16u; ++x) sum += red[(ty * 4u + " + r + "u) * 17u + x];\n";
    // The log-sum-exp where saved: -inf where the row sees no key or all are masked, as
    // attention_lse's reference.
    if (ctx.saved_lse) {
      x += "    if (tx == 0u) {\n" + saved_lse_store(ctx, "      ", "bh * LQ + i", "m" + r, "sum") +
           "    }\n";
    }
    // No keys at all: the reference's sum over nothing is 0.
    x += unrolled(t.quads_v, [&](const std::string& q) {
      std::string y = "    {\n      vec4 o = vis" + r + " == 0u ? vec4(0.0) : acc" + r + "_" + q +
                      " / sum;\n";
      y += "      uint at = (bh * LQ + i) * DV + (tx + " + q + "u * 16u) * 4u;\n";
      y += "      out_st(at, o.x); out_st(at + 1u, o.y); out_st(at + 2u, o.z); out_st(at + 3u, "
           "o.w);\n    }\n";
      return y;
    });
    return x + "  }\n";
  });
  s += "}\n";
  k.name = "attention_tiled_registers";
  k.glsl = std::move(s);
  k.workgroup = {kRegLanes, 1, 1};
  k.groups = glsl::linear_grid(g.heads() * tiles * kRegLanes, ctx.device, kRegLanes).groups;
  return k;
}

// Whether the tensor-core kernel runs: where it fits, asked for (MN_COOP_ATTENTION=1), or by
// choice: unless its grid gives the multiprocessors fewer than two workgroups each and the
// register-tiled kernel serves. Four warps alone on a multiprocessor wait out their barriers
// and loads: on the H200, Whisper's encoder at batch 1 (144 and 192 workgroups) stepped in 9.4
// and 14.6 ms on it against 4.3 and 6.6 on the register tiles (docs/perf.md).
bool takes_coop(const AttentionShape& g, const DeviceTraits& d) {
  if (!attention_lowering::coop_attention_fits(g, d)) return false;
  if (d.coop_attention == DeviceTraits::Choice::always) return true;
  const auto groups = static_cast<int64_t>(attention_lowering::coop_attention_workgroups(g));
  return groups >= 2 * d.groups_to_fill() || !register_tiling_for(g, d);
}

// Whether a tiled kernel (any form) serves these queries.
bool tiled(const AttentionShape& g, const DeviceTraits& d) {
  return takes_coop(g, d) || register_tiling_for(g, d) || tiling_for(g, d);
}

// ---- per row: a workgroup per query row ----

// Few rows with many keys (decoding) leave most of a GPU idle: the keys then split into
// `splits` ranges of `chunk`, each workgroup writing its range's partial softmax state (max,
// sum, weighted values) to scratch, and a second kernel combines them.
struct KeySplit {
  uint64_t splits = 1, chunk = 1;
};

KeySplit key_split(const AttentionShape& g, uint64_t block_keys) {
  KeySplit k;
  const uint64_t rows = g.heads() * g.lq;
  // One block of keys a workgroup: a decode step has few rows, and a workgroup walks its
  // blocks serially. The split is fixed when the step is recorded while the visible keys grow
  // per token, so it is not capped by a workgroup budget: workgroups past a row's position find
  // no keys and return, and the busy ones stay one block each however many rows there are (at
  // most 1024 ranges a row, for the combine's loop).
  k.splits = std::min<uint64_t>(1024, (g.lk + block_keys - 1) / block_keys);
  if (rows * k.splits > (1u << 22)) k.splits = std::max<uint64_t>(1, (1u << 22) / rows);
  if (k.splits <= 1) return {1, g.lk};
  k.chunk = (g.lk + k.splits - 1) / k.splits;
  k.splits = (g.lk + k.chunk - 1) / k.chunk;
  return k;
}

// Floats of one partial: max, sum, then DV weighted values.
uint64_t partial_floats(const AttentionShape& g) { return 2 + g.dv; }

// Where a split row kernel storing its partials as its output puts them
// (LowerContext::attention_partials).
attention_lowering::PartialsLayout partials_layout(const AttentionShape& g, const KeySplit& ks) {
  return {g.heads() * g.lq, ks.splits, g.dv};
}

// Lanes of a row kernel's workgroup: one key per lane per block; wide value rows take more
// lanes so that each keeps at most 8 output columns in registers.
uint32_t row_lanes(const AttentionShape& g, const DeviceTraits& dev) {
  const uint32_t lanes = g.lk <= 32 ? 32 : 64;
  return std::min(most_lanes(dev),
                  std::max(lanes, std::bit_ceil(static_cast<uint32_t>((g.dv + 7) / 8))));
}

// q's row in shared memory when it fits beside the block buffers.
bool row_q_shared(const AttentionShape& g, const DeviceTraits& dev) {
  return g.d > 0 && (g.d + 2 * row_lanes(g, dev)) * sizeof(float) <= dev.max_shared_bytes;
}

// With ctx.rope (cached_attention, q shared): the rope's positions bound after the kernel's
// buffers as `rpos`, and the rotation's functions.
std::string rope_declarations(const LowerContext& ctx, const AttentionShape& g,
                              std::vector<KernelBinding>& bindings) {
  if (!ctx.rope) return "";
  std::string s = glsl::buffer(static_cast<uint32_t>(bindings.size()), DType::i32, "rpos", true);
  bindings.push_back({ArgRef::input(ctx.rope->positions_input), false});
  return s + rope_load_library(ctx.rope->attrs, g.d);
}

// With ctx.rope: the statement setting `rp`, the position its positions give query row (h, i)
// (after head_offsets, which set the coordinates c), and the GLSL expression of query element
// `e` rotated by it.
std::string query_rope_position(const LowerContext& ctx, const AttentionShape& g) {
  Shape positions = ctx.inputs[static_cast<size_t>(ctx.rope->positions_input)].shape;
  positions.insert(positions.begin(), g.rows.size() - positions.size(), 1);
  const std::string stride = positions[g.rank - 2] == 1 ? "0u" : "1u";
  return "  float rp = float(rpos_ldi(" + glsl::broadcast_offset(positions, g.rows, "c") +
         " + i * " + stride + "));\n";
}
std::string rotated_query_element(const AttentionShape& g, const std::string& base = "qb") {
  return "mn_rope(q_ld(" + base + " + e), q_ld(" + base + " + " + rope_partner("e", g.d) +
         "), e, rp)";
}

// Statements filling q_sh with query row i of the head at qb, rotated by the fused rope, then a
// barrier.
std::string load_rotated_query(const LowerContext& ctx, const AttentionShape& g,
                               const std::string& lanes) {
  std::string s = query_rope_position(ctx, g);
  s += "  for (uint e = lane; e < D; e += " + lanes + ") q_sh[e] = " + rotated_query_element(g) +
       ";\n";
  return s + "  barrier();\n";
}

// The query rows a row kernel's workgroup holds: `count` rows g + j·LQ (g its first; heads of
// one key/value head where the stream kernel groups them), with their online-softmax state and
// unnormalized output columns as GLSL expressions of j (and of t, the lane's column index).
struct RowSet {
  uint64_t count = 1;
  std::function<std::string(uint64_t)> m, l;
  std::function<std::string(uint64_t, const std::string&)> value;
  // GLSL: row j's index among the rows.
  static std::string row(uint64_t j) { return j == 0 ? "g" : "(g + " + ulit(j) + " * LQ)"; }
};

// GLSL: where row j's partials start (its range 0's, in partials).
std::string first_partial(const KeySplit& ks, uint64_t j) {
  return "(" + RowSet::row(j) + " * " + ulit(ks.splits) + ")";
}

// The combine's loads, all issued together: every row's first eight partials' values into
// head[] and the partials' maxima and sums into shared memory (split_sh, sum_sh: row j's at
// j · splits). Every load reads a clamped index (what lies past busy or DV is never used).
std::string combine_loads(const AttentionShape& g, const KeySplit& ks, const std::string& lanes,
                          const std::string& cols, const RowSet& rows) {
  const std::string P = ulit(partial_floats(g)), C8 = cols + " * 8u";
  std::string s = "  float head[" + ulit(rows.count) + " * " + C8 + "];\n";
  for (uint64_t j = 0; j < rows.count; ++j) {
    s += "  for (uint t = 0u; t < " + cols + "; ++t) {\n";
    s += "    uint e = lane + t * " + lanes + ";\n";
    s += "    for (uint x = 0u; x < 8u; ++x) {\n";
    s += "      head[" + ulit(j) + " * " + C8 + " + t * 8u + x] = part_ld((" +
         first_partial(ks, j) + " + min(x, busy - 1u)) * " + P + " + 2u + min(e, DV - 1u));\n";
    s += "    }\n  }\n";
  }
  s += "  for (uint p = lane; p < busy; p += " + lanes + ") {\n";
  for (uint64_t j = 0; j < rows.count; ++j) {
    const std::string at = "(" + first_partial(ks, j) + " + p) * " + P;
    const std::string sh = ulit(j * ks.splits) + " + p";
    s += "    split_sh[" + sh + "] = part_ld(" + at + ");\n";
    s += "    sum_sh[" + sh + "] = part_ld(" + at + " + 1u);\n";
  }
  return s + "  }\n  barrier();\n";
}

// Each row's partials' weights in place of their maxima (exp(max - the row's max); empty or
// fully masked ranges, max -inf, weigh 0: they hold l = 0 and no values) and their sums scaled
// by them.
std::string combine_weights(const KeySplit& ks, const std::string& lanes, const RowSet& rows) {
  const std::string S = ulit(ks.splits), R = ulit(rows.count);
  std::string s = "  float mx[" + R + "];\n";
  s += "  for (uint j = 0u; j < " + R + "; ++j) {\n    mx[j] = -mn_inf();\n";
  s += "    for (uint p = 0u; p < busy; ++p) {\n      float v = split_sh[j * " + S + " + p];\n";
  s += "      mx[j] = v > mx[j] ? v : mx[j];\n    }\n  }\n  barrier();\n";
  s += "  for (uint p = lane; p < busy; p += " + lanes + ") {\n";
  s += "    for (uint j = 0u; j < " + R + "; ++j) {\n";
  s += "      float ms = split_sh[j * " + S + " + p];\n";
  s += "      split_sh[j * " + S + " + p] = ms == -mn_inf() ? 0.0 : exp(ms - mx[j]);\n";
  s += "      sum_sh[j * " + S + " + p] *= split_sh[j * " + S + " + p];\n    }\n  }\n";
  return s + "  barrier();\n";
}

// Row j's output: its partials' values weighed and summed (the first eight from head[], any
// further ones loaded eight at a time), divided by the weighed sums.
std::string combine_row(const AttentionShape& g, const KeySplit& ks, const std::string& lanes,
                        const std::string& cols, uint64_t j) {
  const std::string P = ulit(partial_floats(g)), W = ulit(j * ks.splits);
  std::string s = "  {\n    float lsum = 0.0;\n";
  s += "    for (uint p = 0u; p < busy; ++p) lsum += sum_sh[" + W + " + p];\n";
  s += "    for (uint t = 0u; t < " + cols + "; ++t) {\n";
  s += "      uint e = lane + t * " + lanes + ";\n      if (e >= DV) continue;\n";
  s += "      float o = 0.0;\n";
  s += "      for (uint x = 0u; x < 8u && x < busy; ++x) o += head[" + ulit(j) + " * " + cols +
       " * 8u + t * 8u + x] * split_sh[" + W + " + x];\n";
  s += "      for (uint p0 = 8u; p0 < busy; p0 += 8u) {\n        float vals[8];\n";
  s += "        for (uint x = 0u; x < 8u; ++x) {\n";
  s += "          vals[x] = part_ld((" + first_partial(ks, j) + " + min(p0 + x, busy - 1u)) * " +
       P + " + 2u + e);\n        }\n";
  s += "        for (uint x = 0u; x < 8u && p0 + x < busy; ++x) o += vals[x] * split_sh[" + W +
       " + p0 + x];\n      }\n";
  // cached_attention: a query that sees no key (negative position) gets 0, as the reference's
  // sum over nothing; otherwise l >= 1 (the largest score's own term).
  return s + "      out_st(" + RowSet::row(j) + " * DV + e, " +
         (g.has_positions ? "lsum == 0.0 ? 0.0 : o / lsum" : "o / lsum") + ");\n    }\n  }\n";
}

// The end of a split row kernel: the workgroup's last busy one to store its partials (counted in
// done[gw], which it sets back to zero for the next step) combines each of its rows' `busy`
// partials, rescaled to their common max, into the output. No second launch, no barrier
// between. A decoding row has few partials: one memory latency for the whole combine.
std::string last_workgroup_combines(const AttentionShape& g, const KeySplit& ks,
                                    const std::string& lanes, const std::string& cols,
                                    const RowSet& rows) {
  std::string s = "  memoryBarrierBuffer();\n  barrier();\n";
  s += "  if (lane == 0u) last_sh = atomicAdd(done[gw], 1u) == busy - 1u;\n";
  s += "  barrier();\n  if (!last_sh) return;\n  memoryBarrierBuffer();\n";
  s += combine_loads(g, ks, lanes, cols, rows) + combine_weights(ks, lanes, rows);
  for (uint64_t j = 0; j < rows.count; ++j) s += combine_row(g, ks, lanes, cols, j);
  return s + "  if (lane == 0u) done[gw] = 0u;\n";
}

// A split row kernel's shared state for its last workgroup's combine of `rows` rows.
std::string split_shared(const KeySplit& ks, uint64_t rows = 1) {
  const std::string n = ulit(ks.splits * rows);
  return "shared bool last_sh;\nshared float split_sh[" + n + "], sum_sh[" + n + "];\n";
}

// The opening of a row kernel's main(): workgroup w is range part_index of workgroup row gw,
// whose `rows` query rows start at g = (b, h, i) (heads h .. h + rows - 1 of one key/value
// head), lane its invocation, qb the first query row (after head_offsets).
std::string row_start(const AttentionShape& g, const KeySplit& ks, uint64_t rows = 1) {
  const std::string HW = ulit(g.hq / rows);  // workgroup rows per (b, i)
  std::string s = "void main() {\n";
  s += "  uint w = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (w >= " + ulit(g.heads() / rows * g.lq * ks.splits) + ") return;\n";
  s += "  uint gw = w / " + ulit(ks.splits) + ", part_index = w % " + ulit(ks.splits) + ";\n";
  s += "  uint lane = gl_LocalInvocationID.x;\n";
  s += "  uint i = gw % LQ, h = ((gw / LQ) % " + HW + ") * " + ulit(rows) + ", b = gw / (LQ * " +
       HW + ");\n";
  s += "  uint g = (b * HQ + h) * LQ + i;\n";
  s += head_offsets(g, g.attrs.has_mask, "i");
  return s + "  qb += i * D;\n";
}

// The end of a row kernel's main(): each row's output columns (unnormalized, with its m and l)
// stored as this range's partial and combined by the workgroup row's last workgroup, or divided
// by l and stored.
std::string row_end(const AttentionShape& g, const KeySplit& ks, const std::string& lanes,
                    const std::string& cols, const RowSet& rows, bool combine = true) {
  std::string s;
  if (ks.splits > 1) {
    for (uint64_t j = 0; j < rows.count; ++j) {
      s += "  {\n    uint base = (" + RowSet::row(j) + " * " + ulit(ks.splits) +
           " + part_index) * " + ulit(partial_floats(g)) + ";\n";
      s += "    if (lane == 0u) {\n      part_st(base, " + rows.m(j) +
           ");\n      part_st(base + 1u, " + rows.l(j) + ");\n    }\n";
      s += "    for (uint t = 0u; t < " + cols + "; ++t) {\n";
      s += "      uint e = lane + t * " + lanes + ";\n      if (e < DV) part_st(base + 2u + e, " +
           rows.value(j, "t") + ");\n    }\n  }\n";
    }
    return s + (combine ? last_workgroup_combines(g, ks, lanes, cols, rows) : "") + "}\n";
  }
  for (uint64_t j = 0; j < rows.count; ++j) {
    s += "  for (uint t = 0u; t < " + cols + "; ++t) {\n";
    s += "    uint e = lane + t * " + lanes + ";\n";
    s += "    if (e < DV) out_st(" + RowSet::row(j) +
         " * DV + e, visible == 0u ? 0.0 : " + rows.value(j, "t") + " / " + rows.l(j) + ");\n  }\n";
  }
  return s + "}\n";
}

KernelLaunch row_kernel(const LowerContext& ctx, const AttentionShape& g, const KeySplit& ks) {
  const AttentionAttrs& a = g.attrs;
  const DeviceTraits& dev = ctx.device;
  const bool split = ks.splits > 1;
  const uint32_t lanes = row_lanes(g, dev);
  const uint64_t cols = (g.dv + lanes - 1) / lanes;
  const bool q_shared = row_q_shared(g, dev);
  const std::string L = ulit(lanes), COLS = ulit(cols);
  const uint64_t rows = g.heads() * g.lq;

  KernelLaunch k;
  std::string s = declarations(ctx, g, a.has_mask, k.bindings, split);
  s += rope_declarations(ctx, g, k.bindings);
  s += "shared float p_sh[" + L + "];\n" + attention_lowering::workgroup_reductions(L);
  if (split) s += split_shared(ks);
  if (q_shared) s += "shared float q_sh[" + ulit(g.d) + "];\n";
  s += row_start(g, ks);
  std::string q_at = "q_ld(qb + e)";
  if (ctx.rope) {
    s += load_rotated_query(ctx, g, L);
    q_at = "q_sh[e]";
  } else if (q_shared) {
    s += "  for (uint e = lane; e < D; e += " + L + ") q_sh[e] = q_ld(qb + e);\n  barrier();\n";
    q_at = "q_sh[e]";
  }
  s += "  uint visible = " + visible_expr(g, "i") + ";\n";
  // This workgroup's keys: [jb, je), possibly empty.
  s += "  uint jb = part_index * " + ulit(ks.chunk) + ", je = min(visible, jb + " + ulit(ks.chunk) +
       ");\n";
  if (split) {
    // Workgroups past the visible keys leave at once; the busy ones (at least one, which
    // writes the zeros of a query that sees no key) store partials and count.
    s += "  uint busy = max((visible + " + ulit(ks.chunk - 1) + ") / " + ulit(ks.chunk) +
         ", 1u);\n  if (part_index >= busy) return;\n";
  }
  s += "  float m = -mn_inf(), l = 0.0;\n  float acc[" + COLS + "];\n";
  s += "  for (uint t = 0u; t < " + COLS + "; ++t) acc[t] = 0.0;\n";
  s += "  for (uint j0 = jb; j0 < je; j0 += " + L + ") {\n";
  s += "    uint j = j0 + lane;\n    float sc = -mn_inf();\n";
  s += "    if (j < je) {\n      float dot = 0.0;\n";
  // Eight key elements loaded before their products: a loop of one load and one product waits
  // out the memory latency once per element (the keys of a long cache are not in cache).
  s += "      uint e8 = 0u;\n";
  s += "      for (; e8 + 8u <= D; e8 += 8u) {\n        float kv[8];\n";
  s += "        for (uint x = 0u; x < 8u; ++x) kv[x] = k_ld(kb + j * D + e8 + x);\n";
  s += "        for (uint x = 0u; x < 8u; ++x) {\n          uint e = e8 + x;\n";
  s += "          dot += " + q_at + " * kv[x];\n        }\n      }\n";
  s += "      for (uint e = e8; e < D; ++e) dot += " + q_at + " * k_ld(kb + j * D + e);\n";
  s += "      sc = " + score_expr(ctx, g, a, "j") + ";\n    }\n";
  s += "    float bm = wg_max(sc);\n    float mn = bm > m ? bm : m;\n";
  s += "    float p = sc == -mn_inf() ? 0.0 : exp(sc - mn);\n";
  s += "    float alpha = m == -mn_inf() ? 0.0 : exp(m - mn);\n";
  s += "    p_sh[lane] = p;\n    l = l * alpha + wg_sum(p);\n    m = mn;\n";
  s += "    uint cnt = min(" + L + ", je - j0);\n";
  s += "    for (uint t = 0u; t < " + COLS + "; ++t) {\n";
  s += "      uint e = lane + t * " + L + ";\n      if (e < DV) {\n";
  // Eight value loads issued before their products: a loop of one load and one product waits
  // out the memory latency once per key.
  s += "        float o = acc[t] * alpha;\n        uint u = 0u;\n";
  s += "        for (; u + 8u <= cnt; u += 8u) {\n          float vv[8];\n";
  s += "          for (uint x = 0u; x < 8u; ++x) vv[x] = v_ld(vb + (j0 + u + x) * DV + e);\n";
  s += "          for (uint x = 0u; x < 8u; ++x) o += p_sh[u + x] * vv[x];\n        }\n";
  s += "        for (; u < cnt; ++u) o += p_sh[u] * v_ld(vb + (j0 + u) * DV + e);\n";
  s += "        acc[t] = o;\n      }\n    }\n    barrier();\n  }\n";
  RowSet row;
  row.m = [](uint64_t) { return std::string("m"); };
  row.l = [](uint64_t) { return std::string("l"); };
  row.value = [](uint64_t, const std::string& t) { return "acc[" + t + "]"; };
  s += row_end(g, ks, L, COLS, row);
  k.name = std::string(split ? "attention_split" : "attention") +
           (ctx.rope ? "+prologue[rope_positions]" : "");
  k.glsl = std::move(s);
  k.workgroup = {lanes, 1, 1};
  k.groups = glsl::linear_grid(rows * ks.splits * lanes, dev, lanes).groups;
  return k;
}

// ---- per row, streams: the decode kernel ----

// The row kernel's form for heads of 4·2^n elements on devices with subgroup shuffles.
// `width` lanes of one subgroup read a key's row as quads of four elements (`kp` quads a lane,
// and `vp` of its value row), so every load of a block is issued at once, spread over all
// lanes. The workgroup's lanes form lanes / width streams; stream s takes the keys j = s (mod
// streams) of each block, `per_lane` of them a lane. A key's partial dot products meet by a
// butterfly of shuffles within its stream, which leaves the same sum in every lane of it, so
// each stream keeps its own online softmax (m, l) and weighted values in registers: the block
// loop has no barrier. The streams combine once, in shared memory, at the end.
struct Streams {
  uint32_t lanes = 64, width = 16;
  uint64_t qd = 1, qv = 1;  // quads in a key row and in a value row
  uint64_t kp = 1, vp = 1;  // quads of a key and of a value a lane holds (vp may exceed qv's share)
  uint64_t per_lane = 8;    // keys a lane takes per block
  // Query heads a workgroup scores against each key: a key/value head's whole group where a
  // decoding step's heads share their positions (each key and value is then read once for the
  // group instead of once per head), else 1.
  uint64_t group = 1;
  uint64_t streams() const { return lanes / width; }
  uint64_t keys() const { return streams() * per_lane; }
};

// Keys per block the stream kernel aims for: a decoding row's whole chunk in one round of loads.
constexpr uint64_t kStreamBlockKeys = 64;

// The query heads one stream workgroup takes (Streams::group): with
// DeviceTraits::decode_attention_groups (MN_ATTENTION_DECODE_GROUPS=1), a decoding step's group
// of heads over one key/value head, where they see the same keys (positions broadcast over the
// heads) and their states fit a lane's registers; 1 otherwise.
uint64_t stream_group(const AttentionShape& g, const DeviceTraits& dev, const Streams& r) {
  const uint64_t group = g.hq / g.hkv;
  if (!dev.decode_attention_groups || !g.has_positions || g.lq != 1 || group <= 1) return 1;
  if (g.positions[g.rank - 3] != 1) return 1;
  // Each head's query and weighted value quads and its scores of a lane's keys stay in
  // registers: at most 96 floats of them a lane (4 heads of 64 with 8 keys a lane).
  if (group * (4 * r.kp + 4 * r.vp + r.per_lane) > 96) return 1;
  return group;
}

std::optional<Streams> streams_for(const AttentionShape& g, const DeviceTraits& dev) {
  if (!dev.subgroup_shuffle || g.d % 4 != 0 || g.dv % 4 != 0) return std::nullopt;
  Streams r;
  r.qd = g.d / 4;
  r.qv = g.dv / 4;
  if (!std::has_single_bit(r.qd) || !std::has_single_bit(r.qv)) return std::nullopt;
  // A stream's lanes lie in one subgroup whatever size the driver picks for the pipeline.
  r.width = static_cast<uint32_t>(
      std::min<uint64_t>(r.qd, std::bit_floor(std::max(1u, dev.min_subgroup_size))));
  r.kp = r.qd / r.width;
  r.vp = std::max<uint64_t>(1, r.qv / r.width);
  if (std::max(r.kp, r.vp) > 16) return std::nullopt;
  // Keys enough for 8 quads of keys and 8 of values a lane in flight (one key where a lane's
  // share of a row is wider, up to 16): 16 made the kernel spill to local memory with 16-bit
  // caches on the H100 and run several times slower (docs/perf.md).
  r.per_lane = std::max<uint64_t>(1, 8 / std::max(r.kp, r.vp));
  if (dev.decode_attention_lane_keys) {
    r.per_lane = std::max<uint64_t>(
        1, std::min<uint64_t>(dev.decode_attention_lane_keys, 16 / std::max(r.kp, r.vp)));
  }
  // Streams enough for a block of kStreamBlockKeys (or the keys asked for) where the workgroup
  // may grow; whole subgroups of any size the driver may pick.
  const uint64_t block = dev.decode_attention_keys ? dev.decode_attention_keys : kStreamBlockKeys;
  const uint64_t streams = std::max<uint64_t>(1, block / r.per_lane);
  const uint64_t most =
      dev.decode_attention_keys ? std::min(dev.max_workgroup_invocations, 1024u) : most_lanes(dev);
  const uint64_t full = std::max<uint64_t>(64, std::bit_ceil(std::max(1u, dev.max_subgroup_size)));
  r.lanes = static_cast<uint32_t>(std::max(full, std::min(most, streams * r.width)));
  if (r.lanes > dev.max_workgroup_invocations || r.lanes % r.width != 0) return std::nullopt;
  const uint64_t splits = (g.lk + r.keys() - 1) / r.keys();
  // Shared floats a head takes: its streams' states and its partials' maxima and sums; one
  // more for the combine's flag.
  const uint64_t head = r.streams() * (2 + g.dv) + 2 * std::min<uint64_t>(splits, 1024);
  if ((head + 1) * sizeof(float) > dev.max_shared_bytes) return std::nullopt;
  r.group = stream_group(g, dev, r);
  if ((r.group * head + 1) * sizeof(float) > dev.max_shared_bytes) r.group = 1;
  return r;
}

// A value as a cache of `dtype` holds it once stored (cache_write rounds to its dtype).
std::string stored_as(DType dtype, const std::string& v) {
  if (dtype == DType::f16) return "mn_f16_to_f32(mn_f32_to_f16(" + v + "))";
  if (dtype == DType::bf16) return "mn_bf16_to_f32(mn_f32_to_bf16(" + v + "))";
  return v;
}

// GLSL: xq(t), the quad of a key's (or value's) row that is the lane's t-th; a value row
// narrower than a stream leaves lanes with xq(0) >= QV, which hold no value quad.
std::string stream_quads(const Streams& r) {
  const std::string W = ulit(r.width);
  return "uint xq(uint t) { return gl_LocalInvocationID.x % " + W + " + t * " + W + "; }\n";
}

// Statements setting element c of quad first + t of vec4 `array` (t < count) to `value`, with
// `e` the element's index in its row, quad `quad` (of t) of the row.
std::string fill_quads(const std::string& array, uint64_t first, uint64_t count,
                       const std::string& quad, const std::string& value) {
  const std::string at = first == 0 ? "t" : ulit(first) + " + t";
  std::string s = "  for (uint t = 0u; t < " + ulit(count) + "; ++t) {\n";
  s += "    for (uint c = 0u; c < 4u; ++c) {\n      uint e = " + quad + " * 4u + c;\n";
  return s + "      " + array + "[" + at + "][c] = " + value + ";\n    }\n  }\n";
}

// Statements declaring vec4 `array`[count] and filling it (fill_quads).
std::string lane_quads(const std::string& array, uint64_t count, const std::string& quad,
                       const std::string& value) {
  return "  vec4 " + array + "[" + ulit(count) + "];\n" + fill_quads(array, 0, count, quad, value);
}

// With ctx.append: the updates `ku` and `vu`, the writes' positions `wpos`, the key rotation's
// positions `kpos` (and the rotation's functions unless the query's rotation declared them).
std::string append_declarations(const LowerContext& ctx, const AttentionShape& g,
                                std::vector<KernelBinding>& bindings) {
  if (!ctx.append) return "";
  const CacheAppendLoad& a = *ctx.append;
  std::string s;
  auto bind = [&](int input, const std::string& name) {
    s += glsl::buffer(static_cast<uint32_t>(bindings.size()),
                      ctx.inputs[static_cast<size_t>(input)].dtype, name, true);
    bindings.push_back({ArgRef::input(input), false});
  };
  bind(a.k_update, "ku");
  bind(a.v_update, "vu");
  bind(a.positions, "wpos");
  if (a.k_rope) {
    bind(a.k_rope->positions_input, "kpos");
    if (!ctx.rope) s += rope_load_library(a.k_rope->attrs, g.d);
  }
  return s;
}

// With ctx.append: tw, the slot this head's cache row gets (the row is kb's), and the lane's
// quads of the new key (rotated) and value as the caches will hold them, kn[t] and vn[t]: each
// lane computes its own, so no barrier waits for them.
std::string append_row(const LowerContext& ctx, const AttentionShape& g, const Streams& r) {
  if (!ctx.append) return "";
  const CacheAppendLoad& a = *ctx.append;
  const std::span<const TensorType> in = ctx.inputs;
  const TensorType operands[3] = {in[1], in[static_cast<size_t>(a.k_update)],
                                  in[static_cast<size_t>(a.positions)]};
  const auto view = ops::cache_detail::cache_write_view(operands);
  std::string s = "  uint crow = kb / (LK * D);\n";
  s += "  int tw = wpos_ldi(crow / " + ulit(view.rows_per_position_row) + ");\n";
  s += "  uint kub = crow * D, vub = crow * DV;\n";
  std::string key = "ku_ld(kub + e)";
  if (a.k_rope) {
    const Shape& x = in[static_cast<size_t>(a.k_update)].shape;
    const Shape rows(x.begin(), x.end() - 1);
    Shape positions = in[static_cast<size_t>(a.k_rope->positions_input)].shape;
    positions.insert(positions.begin(), rows.size() - positions.size(), 1);
    s += glsl::unravel(rows, "crow", "wr");
    s += "  float krp = float(kpos_ldi(" + glsl::broadcast_offset(positions, rows, "wr") + "));\n";
    key = "mn_rope(" + key + ", ku_ld(kub + " + rope_partner("e", g.d) + "), e, krp)";
  }
  s += lane_quads("kn", r.kp, "xq(t)", stored_as(in[1].dtype, key));
  // A lane past the value row's quads holds none; it reads the last quad in range.
  return s +
         lane_quads("vn", r.vp, "min(xq(t), QV - 1u)", stored_as(in[2].dtype, "vu_ld(vub + e)"));
}

// The lane's query quads of each of the workgroup's heads j, q4[j * kp + t], rotated by the
// fused rope at the rows' position (ctx.rope; the heads of a group share it).
std::string stream_query(const LowerContext& ctx, const AttentionShape& g, const Streams& r) {
  std::string s = ctx.rope ? query_rope_position(ctx, g) : "";
  s += "  vec4 q4[" + ulit(r.group * r.kp) + "];\n";
  for (uint64_t j = 0; j < r.group; ++j) {
    const std::string base = j == 0 ? "qb" : "(qb + " + ulit(j * g.lq * g.d) + ")";
    s += fill_quads("q4", j * r.kp, r.kp, "xq(t)",
                    ctx.rope ? rotated_query_element(g, base) : "q_ld(" + base + " + e)");
  }
  return s;
}

// Loads of the lane's keys and values of the block at j0 into kq and vq, bounded only by the
// cache's length: they need neither the visible length nor the new slot, so the first block's
// are issued with the query's loads. What lies past the visible keys is replaced by zeros
// before use (stream_block), never multiplied: an unwritten slot may hold anything.
std::string stream_loads(const Streams& r, const std::string& j0) {
  const std::string S = ulit(r.streams()), KP = ulit(r.kp), VP = ulit(r.vp);
  std::string s = "    for (uint u = 0u; u < " + ulit(r.per_lane) + "; ++u) {\n";
  // Clamped, not skipped: a load inside a branch may wait out its latency before the next is
  // issued. A key past the cache is past the visible ones too, and a value quad past the row
  // (lanes holding none) is never stored.
  s += "      uint at = min(" + j0 + " + stream + u * " + S + ", LK - 1u);\n";
  s += "      for (uint t = 0u; t < " + KP + "; ++t) {\n";
  s += "        kq[u * " + KP + " + t] = k4_ld(kb / 4u + at * QD + xq(t));\n";
  s += "      }\n      for (uint t = 0u; t < " + VP + "; ++t) {\n";
  s += "        vq[u * " + VP + " + t] = v4_ld(vb / 4u + at * QV + min(xq(t), QV - 1u));\n";
  return s + "      }\n    }\n";
}

// Statements of one block at j0 of the stream kernel, its loads in kq and vq: the keys past the
// visible ones zeroed and the new slot put in (ctx.append), then for each of the workgroup's
// heads j the lane's scores, its stream's online softmax update of m[j] and l[j], and the
// lane's weighted value quads acc[j * vp ..] rescaled and added to.
std::string stream_block(const LowerContext& ctx, const AttentionShape& g, const Streams& r) {
  const std::string S = ulit(r.streams()), KP = ulit(r.kp), VP = ulit(r.vp);
  const std::string U = ulit(r.per_lane);
  std::string s = "    float sc[" + ulit(r.group * r.per_lane) + "];\n";
  s += "    for (uint u = 0u; u < " + U + "; ++u) {\n";
  s += "      uint key = j0 + stream + u * " + S + ";\n      bool seen = key < je;\n";
  if (ctx.append) s += "      bool fresh = int(key) == tw;\n";
  auto take = [&](const std::string& held, const std::string& count, const std::string& fresh) {
    std::string t = "      for (uint t = 0u; t < " + count + "; ++t) {\n";
    t += "        " + held + "[u * " + count + " + t] = seen ? ";
    if (ctx.append) t += "fresh ? " + fresh + "[t] : ";
    return t + held + "[u * " + count + " + t] : vec4(0.0);\n      }\n";
  };
  s += take("kq", KP, "kn") + take("vq", VP, "vn");
  for (uint64_t j = 0; j < r.group; ++j) {
    const std::string QJ = ulit(j * r.kp);
    s += "      {\n        float part = 0.0;\n";
    s += "        for (uint t = 0u; t < " + KP + "; ++t) part += dot(q4[" + QJ + " + t], kq[u * " +
         KP + " + t]);\n";
    // Every lane of the stream ends with the same sum: each step adds the same two values in
    // either order.
    s += "        for (uint x = 1u; x < " + ulit(r.width) +
         "; x <<= 1) part += subgroupShuffleXor(part, x);\n";
    s += "        float dot = part;\n";
    s += "        sc[" + ulit(j * r.per_lane) + " + u] = seen ? " +
         score_expr(ctx, g, g.attrs, "key") + " : -mn_inf();\n      }\n";
  }
  s += "    }\n";
  for (uint64_t j = 0; j < r.group; ++j) {
    const std::string J = ulit(j), SJ = ulit(j * r.per_lane), AJ = ulit(j * r.vp);
    s += "    {\n      float bm = sc[" + SJ + "];\n";
    s += "      for (uint u = 1u; u < " + U + "; ++u) bm = max(bm, sc[" + SJ + " + u]);\n";
    s += "      float mn = max(m[" + J + "], bm);\n";
    s += "      float alpha = m[" + J + "] == -mn_inf() ? 0.0 : exp(m[" + J + "] - mn);\n";
    s += "      l[" + J + "] *= alpha;\n";
    s += "      for (uint t = 0u; t < " + VP + "; ++t) acc[" + AJ + " + t] *= alpha;\n";
    s += "      for (uint u = 0u; u < " + U + "; ++u) {\n";
    s +=
        "        float p = sc[" + SJ + " + u] == -mn_inf() ? 0.0 : exp(sc[" + SJ + " + u] - mn);\n";
    s += "        l[" + J + "] += p;\n";
    s += "        for (uint t = 0u; t < " + VP + "; ++t) acc[" + AJ + " + t] += p * vq[u * " + VP +
         " + t];\n      }\n";
    s += "      m[" + J + "] = mn;\n    }\n";
  }
  return s;
}

// The streams' states combined: each stream's m, l and value quads of every head through
// shared memory, then each head's workgroup m[j], l[j] and output columns o[j * cols + t]
// (column lane + t * lanes) for row_end.
std::string combine_streams(const Streams& r, uint64_t cols) {
  const std::string S = ulit(r.streams()), L = ulit(r.lanes), VP = ulit(r.vp), G = ulit(r.group);
  std::string s = "  if (gl_LocalInvocationID.x % " + ulit(r.width) + " == 0u) {\n";
  s += "    for (uint j = 0u; j < " + G + "; ++j) {\n";
  s += "      sm_sh[stream * " + G + " + j] = m[j];\n      sl_sh[stream * " + G + " + j] = l[j];\n";
  s += "    }\n  }\n";
  s += "  for (uint j = 0u; j < " + G + "; ++j) {\n";
  s += "    for (uint t = 0u; t < " + VP + "; ++t) {\n";
  s += "      if (xq(t) < QV) {\n";
  s += "        for (uint c = 0u; c < 4u; ++c) so_sh[(stream * " + G +
       " + j) * DV + xq(t) * 4u + c] = acc[j * " + VP + " + t][c];\n";
  s += "      }\n    }\n  }\n  barrier();\n";
  s += "  float o[" + ulit(r.group * cols) + "];\n";
  s += "  for (uint j = 0u; j < " + G + "; ++j) {\n";
  s += "    float mj = -mn_inf();\n";
  s += "    for (uint x = 0u; x < " + S + "; ++x) mj = max(mj, sm_sh[x * " + G + " + j]);\n";
  s += "    float sw[" + S + "];\n    float lj = 0.0;\n";
  s += "    for (uint x = 0u; x < " + S + "; ++x) {\n";
  s += "      float mx = sm_sh[x * " + G + " + j];\n";
  s += "      sw[x] = mx == -mn_inf() ? 0.0 : exp(mx - mj);\n";
  s += "      lj += sw[x] * sl_sh[x * " + G + " + j];\n    }\n";
  s += "    for (uint t = 0u; t < " + ulit(cols) + "; ++t) {\n";
  s += "      uint e = lane + t * " + L + ";\n      float v = 0.0;\n";
  s += "      if (e < DV) {\n";
  s += "        for (uint x = 0u; x < " + S + "; ++x) v += sw[x] * so_sh[(x * " + G +
       " + j) * DV + e];\n      }\n";
  s += "      o[j * " + ulit(cols) + " + t] = v;\n    }\n";
  return s + "    m[j] = mj;\n    l[j] = lj;\n  }\n";
}

// Statements storing an idle workgroup's partials where they are the output
// (LowerContext::attention_partials): each of its rows' range holds no key, max -inf, sum 0 and
// zero values, which the product combining them weighs 0 (PartialsLayout).
std::string empty_partials(const AttentionShape& g, const KeySplit& ks, const Streams& r) {
  std::string s = "    for (uint j = 0u; j < " + ulit(r.group) + "; ++j) {\n";
  s += "      uint base = ((g + j * LQ) * " + ulit(ks.splits) + " + part_index) * " +
       ulit(partial_floats(g)) + ";\n";
  s += "      for (uint e = lane; e < " + ulit(partial_floats(g)) + "; e += " + ulit(r.lanes) +
       ") part_st(base + e, e == 0u ? -mn_inf() : 0.0);\n";
  return s + "    }\n";
}

// Whether the stream kernel issues its first block's loads before the visible length is known
// (one memory latency instead of two): a small grid does, a workgroup that finds itself idle
// dropping them; a large one (many rows over a long cache) would read the whole cache for
// nothing, and waits for the length (docs/perf.md).
bool stream_speculates(const DeviceTraits& dev, const KeySplit& ks, uint64_t rows) {
  return ks.splits == 1 || rows * ks.splits <= 4 * static_cast<uint64_t>(dev.groups_to_fill());
}

// GLSL: the workgroup's keys [jb, je) and, split, the row's busy workgroups `busy` (an idle
// workgroup returns), with the first block's loads where they were not speculated or were for
// other keys. The grid is fixed when the step is recorded, ks.splits workgroups a row; a busy
// one takes `per` blocks of the visible keys: one, unless the row has more blocks than the grid
// has workgroups (past 1024 blocks). Walking several blocks a workgroup to leave fewer partials
// measured slower for a batch over a long cache (docs/perf.md).
std::string stream_range(const AttentionShape& g, const Streams& r, const KeySplit& ks,
                         bool speculate, bool partials_out) {
  const std::string KEYS = ulit(r.keys()), SPLITS = ulit(ks.splits);
  // One workgroup a row always speculates (stream_speculates): its first block is at 0.
  if (ks.splits == 1) return "  uint jb = 0u, je = visible;\n";
  std::string s = "  uint blocks = (visible + " + ulit(r.keys() - 1) + ") / " + KEYS + ";\n";
  s += "  uint per = max((blocks + " + ulit(ks.splits - 1) + ") / " + SPLITS +
       ", 1u), chunk = per * " + KEYS + ";\n";
  s += "  uint busy = max((visible + chunk - 1u) / chunk, 1u);\n";
  if (partials_out) {
    // The count of ranges holding keys, after every row's ranges: the reader combines those.
    s += "  if (part_index == 0u && lane == 0u) {\n";
    s += "    for (uint j = 0u; j < " + ulit(r.group) + "; ++j) part_st(" +
         ulit(partials_layout(g, ks).counts_offset()) + " + g + j * LQ, float(busy));\n";
    s += "  }\n";
  }
  s += partials_out
           ? "  if (part_index >= busy) {\n" + empty_partials(g, ks, r) + "    return;\n  }\n"
           : "  if (part_index >= busy) return;\n";
  s += "  uint jb = part_index * chunk, je = min(visible, jb + chunk);\n";
  s += speculate ? "  if (per != 1u) {\n" : "  {\n";
  return s + stream_loads(r, "jb") + "  }\n";
}

KernelLaunch stream_row_kernel(const LowerContext& ctx, const AttentionShape& g, const KeySplit& ks,
                               const Streams& r) {
  const AttentionAttrs& a = g.attrs;
  const bool split = ks.splits > 1;
  const std::string L = ulit(r.lanes), S = ulit(r.streams());
  const uint64_t cols = (g.dv + r.lanes - 1) / r.lanes;
  const uint64_t rows = g.heads() * g.lq;

  KernelLaunch k;
  std::string s = declarations(ctx, g, a.has_mask, k.bindings, split);
  s = glsl::require_extensions(std::move(s),
                               {"GL_KHR_shader_subgroup_basic", "GL_KHR_shader_subgroup_shuffle"});
  s += glsl::quad_view(1, ctx.inputs[1].dtype, "k") + glsl::quad_view(2, ctx.inputs[2].dtype, "v");
  s += "const uint QD = " + ulit(r.qd) + ", QV = " + ulit(r.qv) + ";\n";
  s += rope_declarations(ctx, g, k.bindings);
  s += append_declarations(ctx, g, k.bindings);
  s += stream_quads(r);
  const std::string SG = ulit(r.streams() * r.group);
  s += "shared float sm_sh[" + SG + "], sl_sh[" + SG + "], so_sh[" +
       ulit(r.streams() * r.group * g.dv) + "];\n";
  if (split) s += split_shared(ks, r.group);
  s += row_start(g, ks, r.group);
  s += "  uint stream = lane / " + ulit(r.width) + ";\n";
  // The visible length, the query and the new slot's loads in flight together, with the first
  // block's where the grid is small (stream_speculates).
  const bool speculate = stream_speculates(ctx.device, ks, rows / r.group);
  s += "  uint visible = " + visible_expr(g, "i") + ";\n";
  s += "  vec4 kq[" + ulit(r.per_lane * r.kp) + "], vq[" + ulit(r.per_lane * r.vp) + "];\n";
  if (speculate) s += "  {\n" + stream_loads(r, "part_index * " + ulit(r.keys())) + "  }\n";
  s += stream_query(ctx, g, r) + append_row(ctx, g, r);
  s += stream_range(g, r, ks, speculate, ctx.attention_partials);
  const std::string G = ulit(r.group);
  s += "  float m[" + G + "], l[" + G + "];\n";
  s += "  for (uint j = 0u; j < " + G + "; ++j) {\n    m[j] = -mn_inf();\n    l[j] = 0.0;\n  }\n";
  s += "  vec4 acc[" + ulit(r.group * r.vp) + "];\n";
  s += "  for (uint t = 0u; t < " + ulit(r.group * r.vp) + "; ++t) acc[t] = vec4(0.0);\n";
  // The loop runs while any stream has keys: its bounds are the workgroup's, so every lane
  // takes part in every shuffle.
  s += "  for (uint j0 = jb; j0 < je; j0 += " + ulit(r.keys()) + ") {\n";
  s += "    if (j0 != jb) {\n" + stream_loads(r, "j0") + "    }\n";
  s += stream_block(ctx, g, r) + "  }\n";
  s += combine_streams(r, cols);
  RowSet heads;
  heads.count = r.group;
  heads.m = [](uint64_t j) { return "m[" + ulit(j) + "]"; };
  heads.l = [](uint64_t j) { return "l[" + ulit(j) + "]"; };
  heads.value = [cols](uint64_t j, const std::string& t) {
    return "o[" + ulit(j * cols) + " + " + t + "]";
  };
  s += row_end(g, ks, L, ulit(cols), heads, !ctx.attention_partials);
  k.name = std::string(split ? "attention_split" : "attention") +
           (ctx.rope ? "+prologue[rope_positions]" : "") + "+streams" +
           (r.group > 1 ? "+heads[" + std::to_string(r.group) + "]" : "") +
           (ctx.append ? "+reads_new_slots" : "") + (ctx.attention_partials ? "+partials" : "");
  k.glsl = std::move(s);
  k.workgroup = {r.lanes, 1, 1};
  k.groups = glsl::linear_grid(rows / r.group * ks.splits * r.lanes, ctx.device, r.lanes).groups;
  return k;
}

Lowering lower_attention_kernels(const LowerContext& ctx, const AttentionShape& g);

Lowering lower_attention(const LowerContext& ctx) {
  glsl::require_storage(ctx);
  const AttentionShape g(ctx);
  if (ctx.node.type.numel() == 0) return {};
  if (ctx.rope && !attention_lowering::row_kernel_reads_rope(ctx)) {
    throw Error("attention lowering: this cached_attention cannot read its query rotated");
  }
  if (ctx.saved_lse && !attention_lowering::saves_lse(ctx)) {
    throw Error("attention lowering: this attention's kernel cannot store the log-sum-exp");
  }
  Lowering low = lower_attention_kernels(ctx, g);
  if (ctx.saved_lse) low.launches.front().name += "+lse";
  return low;
}

Lowering lower_attention_kernels(const LowerContext& ctx, const AttentionShape& g) {
  Lowering low;
  if (attention_lowering::takes_tensor_forward(ctx, g)) {
    return attention_lowering::tensor_attention_kernel(ctx, g);
  }
  if (takes_coop(g, ctx.device)) {
    low.launches.push_back(attention_lowering::coop_attention_kernel(ctx, g));
    return low;
  }
  if (const std::optional<RegisterTiling> t = register_tiling_for(g, ctx.device)) {
    low.launches.push_back(register_tiled_kernel(ctx, g, *t));
    return low;
  }
  if (const std::optional<Tiling> t = tiling_for(g, ctx.device)) {
    low.launches.push_back(tiled_kernel(ctx, g, *t));
    return low;
  }
  if (ctx.append && !attention_lowering::takes_cache_append(ctx)) {
    throw Error("attention lowering: this cached_attention cannot read the new cache slots");
  }
  const std::optional<Streams> streams = streams_for(g, ctx.device);
  const KeySplit ks = key_split(g, streams ? streams->keys() : 64);
  if (ctx.attention_partials) {
    if (!streams || ks.splits == 1) {
      throw Error("attention lowering: this cached_attention's kernel cannot store its partials");
    }
    low.launches.push_back(stream_row_kernel(ctx, g, ks, *streams));
    low.output_bytes.push_back(partials_layout(g, ks).bytes());
    return low;
  }
  low.launches.push_back(streams ? stream_row_kernel(ctx, g, ks, *streams)
                                 : row_kernel(ctx, g, ks));
  if (ks.splits > 1) {
    // Partials of every query row; a counter per workgroup row (a group of heads).
    const uint64_t group = streams ? streams->group : 1;
    low.scratch_bytes.push_back(g.heads() * g.lq * ks.splits * partial_floats(g) * sizeof(float));
    low.counter_bytes.push_back(g.heads() / group * g.lq * sizeof(uint32_t));
  }
  return low;
}

}  // namespace

namespace attention_lowering {

std::string workgroup_reductions(const std::string& lanes) {
  std::string s = "shared float red[" + lanes + "];\n";
  for (const auto& [name, comb] :
       {std::pair{"wg_sum", "x + y"}, std::pair{"wg_max", "y > x ? y : x"}}) {
    s += std::string("float ") + name + "(float v) {\n  uint t = gl_LocalInvocationID.x;\n";
    s += "  red[t] = v;\n  barrier();\n";
    s += "  for (uint h = " + lanes + " / 2u; h > 0u; h >>= 1) {\n";
    s += "    if (t < h) { float x = red[t], y = red[t + h]; red[t] = " + std::string(comb) +
         "; }\n    barrier();\n  }\n  float r = red[0];\n  barrier();\n  return r;\n}\n";
  }
  return s;
}

bool saves_lse(const LowerContext& ctx) {
  if (ctx.node.op_name() != "scaled_dot_product_attention" || ctx.rope || ctx.append) return false;
  const AttentionShape g(ctx);
  return !g.has_positions &&
         (attention_lowering::takes_tensor_forward(ctx, g) || takes_coop(g, ctx.device) ||
          register_tiling_for(g, ctx.device) || tiling_for(g, ctx.device));
}

bool forward_on_tensor_cores(const LowerContext& ctx) {
  if (ctx.node.op_name() != "scaled_dot_product_attention" &&
      ctx.node.op_name() != "cached_attention") {
    return false;
  }
  const AttentionShape g(ctx);
  return attention_lowering::takes_tensor_forward(ctx, g) || takes_coop(g, ctx.device);
}

bool row_kernel_reads_rope(const LowerContext& ctx) {
  if (ctx.node.op_name() != "cached_attention" || !ctx.rope || ctx.rope->operand != 0) {
    return false;
  }
  const AttentionShape g(ctx);
  return g.d % 2 == 0 && ctx.inputs[0].dtype == DType::f32 &&
         !tiled(g, ctx.device) && row_q_shared(g, ctx.device);
}

std::optional<PartialsLayout> partials_of(const LowerContext& ctx) {
  if (ctx.node.op_name() != "cached_attention") return std::nullopt;
  const AttentionShape g(ctx);
  if (g.lq != 1 || tiled(g, ctx.device)) return std::nullopt;
  const std::optional<Streams> streams = streams_for(g, ctx.device);
  if (!streams) return std::nullopt;
  const KeySplit ks = key_split(g, streams->keys());
  if (ks.splits == 1) return std::nullopt;
  return partials_layout(g, ks);
}

bool takes_cache_append(const LowerContext& ctx) {
  if (ctx.node.op_name() != "cached_attention" || !ctx.append) return false;
  const AttentionShape g(ctx);
  if (tiled(g, ctx.device) || !streams_for(g, ctx.device) || g.lq != 1) return false;
  const CacheAppendLoad& a = *ctx.append;
  const TensorType &ku = ctx.inputs[static_cast<size_t>(a.k_update)],
                   &vu = ctx.inputs[static_cast<size_t>(a.v_update)];
  if (!is_float(ku.dtype) || !is_float(vu.dtype)) return false;
  if (ku.shape.back() != static_cast<int64_t>(g.d) || vu.shape.back() != static_cast<int64_t>(g.dv)) {
    return false;
  }
  // One cache row per key head of the keys' batch (the writes' rows are the caches' rows).
  if (ku.numel() != ctx.inputs[1].numel() / static_cast<int64_t>(g.lk) ||
      vu.numel() != ctx.inputs[2].numel() / static_cast<int64_t>(g.lk)) {
    return false;
  }
  if (a.k_rope) {
    if (a.k_rope->operand != a.k_update || g.d % 2 != 0) return false;
    if (ctx.rope && !(ctx.rope->attrs == a.k_rope->attrs)) return false;
  }
  return true;
}

}  // namespace attention_lowering

void register_attention_lowerings(LoweringRegistry& r) {
  r.add("scaled_dot_product_attention", lower_attention);
  r.add("rope", [](const LowerContext& ctx) { return attention_lowering::lower_rope(ctx, false); });
  r.add("rope_backward",
        [](const LowerContext& ctx) { return attention_lowering::lower_rope(ctx, true); });
  r.add("cached_attention", lower_attention);
  r.add("rope_positions", [](const LowerContext& ctx) {
    return attention_lowering::lower_rope_positions(ctx, false);
  });
  r.add("rope_positions_backward", [](const LowerContext& ctx) {
    return attention_lowering::lower_rope_positions(ctx, true);
  });
}

}  // namespace mn::codegen
