// GPU lowering of attention's training ops (src/ir/ops/attention_training.cpp): the per-row
// log-sum-exp of the scores and the gradients of q, k and v, each probability recomputed from
// q, k and the log-sum-exp where it is used, so no Lq x Lk tensor is ever stored.
//
// Tensor-core kernels where the device and the operands suit them
// (lower_attention_training_coop.h), else register-tiled kernels where the head sizes allow
// (kernels/attention_training_tiled.comp: a workgroup per tile of 32 or 16 rows streaming blocks
// of 64 to 16 rows of the other side through shared memory, 4 rows × block/16 scores per lane),
// else scalar ones, a workgroup per row of the result and 64 lanes:
// - attention_lse, attention_grad_q: a workgroup per query row. Per block of 64 keys, each lane
//   scores one key (q's row in shared memory); the block's dS (or the running max and sum) is
//   shared and every lane accumulates its output columns over the block.
// - attention_grad_k, attention_grad_v: a workgroup per key row of a key/value head. It walks
//   the query rows of every query head of its group (the GQA sum happens here, no repeated
//   k or v) in blocks of 64, from the key's own row on when causal (the rows above never see it).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "codegen/attention_training_shape.h"
#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_attention.h"
#include "codegen/lower_attention_training_coop.h"
#include "codegen/lower_attention_training_tensor.h"
#include "codegen/lower_families.h"
#include "ir/ops/attention.h"
#include "ir/ops/common.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

using attention_training::declarations;
using attention_training::Form;
using attention_training::has_other_b;
using attention_training::has_own_b;
using attention_training::mask_batch;
using attention_training::query_own;
using attention_training::TrainingShape;

constexpr uint32_t kLanes = attention_training::kScalarLanes;

// The score of query row `i` of head `h` against key `j` from `dot` (q . k): scaled, masked.
std::string score_expr(const TrainingShape& g, const std::string& h, const std::string& i,
                       const std::string& j) {
  std::string s = "scaled(dot)";
  if (g.attrs.has_mask) {
    const size_t R = g.mask_strides.size();
    s += " + mask_ld(mbatch + " + h + " * " + ulit(g.mask_strides[R - 3]) + " + " + i + " * " +
         ulit(g.mask_strides[R - 2]) + " + " + j + " * " + ulit(g.mask_strides[R - 1]) + ")";
  }
  return s;
}

// The prologue of the query-row kernels: row w = (b, h, i), q's row in shared memory, the keys
// it sees.
std::string query_row_prologue(const TrainingShape& g) {
  std::string s = "void main() {\n";
  s += "  uint w = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (w >= " + ulit(g.rows()) + ") return;\n";
  s += "  uint lane = gl_LocalInvocationID.x;\n";
  s += "  uint i = w % LQ, bh = w / LQ, h = bh % HQ, b = bh / HQ;\n";
  s += "  uint kb = (b * HKV + h / GROUP) * LK;\n";  // the head's first key row
  s += mask_batch(g);
  s += "  for (uint e = lane; e < D; e += L) q_sh[e] = q_ld(w * D + e);\n";
  s += std::string("  uint visible = ") + (g.attrs.causal ? "min(LK, i + 1u)" : "LK") + ";\n";
  return s;
}

// Lane's key j = j0 + lane of the block: its score into `sc` (-inf past the visible keys).
std::string lane_score(const TrainingShape& g) {
  std::string s = "    uint j = j0 + lane;\n    float sc = -mn_inf();\n";
  s += "    if (j < visible) {\n      float dot = 0.0;\n";
  s += "      for (uint e = 0u; e < D; ++e) dot += q_sh[e] * k_ld((kb + j) * D + e);\n";
  s += "      sc = " + score_expr(g, "h", "i", "j") + ";\n    }\n";
  return s;
}

KernelLaunch launch(const LowerContext& ctx, const TrainingShape& g, std::string name,
                    std::string glsl, std::vector<KernelBinding> bindings) {
  KernelLaunch k;
  k.name = std::move(name);
  k.glsl = std::move(glsl);
  k.bindings = std::move(bindings);
  k.workgroup = {kLanes, 1, 1};
  k.groups = glsl::linear_grid(g.rows() * kLanes, ctx.device, kLanes).groups;
  return k;
}

// Online max and sum over the keys, one block of 64 at a time, as the forward kernels do.
KernelLaunch lse_kernel(const LowerContext& ctx, const TrainingShape& g) {
  std::vector<KernelBinding> bindings;
  std::string s = declarations(ctx, g, bindings);
  s += "shared float q_sh[" + ulit(std::max<uint64_t>(g.d, 1)) + "];\n" +
       attention_lowering::workgroup_reductions("L");
  s += query_row_prologue(g);
  s += "  barrier();\n  float m = -mn_inf(), l = 0.0;\n";
  s += "  for (uint j0 = 0u; j0 < visible; j0 += L) {\n" + lane_score(g);
  s += "    float bm = wg_max(sc);\n    float mn = bm > m ? bm : m;\n";
  s += "    float p = sc == -mn_inf() ? 0.0 : exp(sc - mn);\n";
  s += "    float alpha = m == -mn_inf() ? 0.0 : exp(m - mn);\n";
  s += "    l = l * alpha + wg_sum(p);\n    m = mn;\n  }\n";
  // No visible key, or every one masked: -inf, as the reference.
  s += "  if (lane == 0u) out_st(w, m == -mn_inf() ? -mn_inf() : m + log(l));\n}\n";
  return launch(ctx, g, "attention_lse", std::move(s), std::move(bindings));
}

// dQ_i = scale * sum_j dS_ij k_j, the block's dS shared by the lanes.
KernelLaunch grad_q_kernel(const LowerContext& ctx, const TrainingShape& g) {
  std::vector<KernelBinding> bindings;
  std::string s = declarations(ctx, g, bindings);
  const std::string COLS = ulit((g.d + kLanes - 1) / kLanes);
  s += "shared float q_sh[" + ulit(std::max<uint64_t>(g.d, 1)) + "];\n";
  s += "shared float do_sh[" + ulit(std::max<uint64_t>(g.dv, 1)) + "];\n";
  s += "shared float ds_sh[L];\n";
  s += query_row_prologue(g);
  s += "  for (uint e = lane; e < DV; e += L) do_sh[e] = dout_ld(w * DV + e);\n";
  s += "  float lse_i = lse_ld(w), delta_i = delta_ld(w);\n  barrier();\n";
  s += "  float acc[" + COLS + "];\n";
  s += "  for (uint t = 0u; t < " + COLS + "; ++t) acc[t] = 0.0;\n";
  s += "  for (uint j0 = 0u; j0 < visible; j0 += L) {\n" + lane_score(g);
  s += "    float ds = 0.0;\n    if (sc != -mn_inf()) {\n";
  s += "      float dp = 0.0;\n";
  s += "      for (uint e = 0u; e < DV; ++e) dp += do_sh[e] * v_ld((kb + j) * DV + e);\n";
  s += "      ds = exp(sc - lse_i) * (dp - delta_i);\n    }\n";
  s += "    ds_sh[lane] = ds;\n    barrier();\n";
  s += "    uint cnt = min(L, visible - j0);\n";
  s += "    for (uint t = 0u; t < " + COLS + "; ++t) {\n";
  s += "      uint e = lane + t * L;\n      if (e < D) {\n        float a = acc[t];\n";
  s += "        for (uint u = 0u; u < cnt; ++u) a += ds_sh[u] * k_ld((kb + j0 + u) * D + e);\n";
  s += "        acc[t] = a;\n      }\n    }\n    barrier();\n  }\n";
  s += "  for (uint t = 0u; t < " + COLS + "; ++t) {\n";
  s += "    uint e = lane + t * L;\n    if (e < D) out_st(w * D + e, scaled(acc[t]));\n  }\n}\n";
  return launch(ctx, g, "attention_grad_q", std::move(s), std::move(bindings));
}

// dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij q_i over the query rows of every head of
// the group, the block's weights shared by the lanes.
KernelLaunch grad_kv_kernel(const LowerContext& ctx, const TrainingShape& g) {
  const bool dk = g.form == Form::grad_k;
  const uint64_t width = dk ? g.d : g.dv;
  const std::string W = ulit(width), COLS = ulit((width + kLanes - 1) / kLanes);
  std::vector<KernelBinding> bindings;
  std::string s = declarations(ctx, g, bindings);
  s += "shared float k_sh[" + ulit(std::max<uint64_t>(g.d, 1)) + "];\n";
  if (dk) s += "shared float v_sh[" + ulit(std::max<uint64_t>(g.dv, 1)) + "];\n";
  s += "shared float w_sh[L];\n";
  s += "void main() {\n";
  s += "  uint w = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (w >= " + ulit(g.rows()) + ") return;\n";
  s += "  uint lane = gl_LocalInvocationID.x;\n";
  s += "  uint j = w % LK, bk = w / LK, hk = bk % HKV, b = bk / HKV;\n";
  s += mask_batch(g);
  s += "  for (uint e = lane; e < D; e += L) k_sh[e] = k_ld(w * D + e);\n";
  if (dk) s += "  for (uint e = lane; e < DV; e += L) v_sh[e] = v_ld(w * DV + e);\n";
  s += "  barrier();\n";
  s += "  float acc[" + COLS + "];\n";
  s += "  for (uint t = 0u; t < " + COLS + "; ++t) acc[t] = 0.0;\n";
  // Causal: query i sees key j when j <= i.
  s += std::string("  uint first = ") + (g.attrs.causal ? "j" : "0u") + ";\n";
  s += "  for (uint gi = 0u; gi < GROUP; ++gi) {\n";
  s += "    uint h = hk * GROUP + gi, rb = (b * HQ + h) * LQ;\n";  // the head's first query row
  s += "    for (uint i0 = first; i0 < LQ; i0 += L) {\n";
  s += "      uint i = i0 + lane;\n      float wt = 0.0;\n";
  s += "      if (i < LQ) {\n        float dot = 0.0;\n";
  s += "        for (uint e = 0u; e < D; ++e) dot += q_ld((rb + i) * D + e) * k_sh[e];\n";
  s += "        float sc = " + score_expr(g, "h", "i", "j") + ";\n";
  s += "        if (sc != -mn_inf()) {\n";
  s += "          float p = exp(sc - lse_ld(rb + i));\n";
  if (dk) {
    s += "          float dp = 0.0;\n";
    s += "          for (uint e = 0u; e < DV; ++e) dp += dout_ld((rb + i) * DV + e) * v_sh[e];\n";
    s += "          wt = p * (dp - delta_ld(rb + i));\n";
  } else {
    s += "          wt = p;\n";
  }
  s += "        }\n      }\n";
  s += "      w_sh[lane] = wt;\n      barrier();\n";
  s += "      uint cnt = min(L, LQ - i0);\n";
  s += "      for (uint t = 0u; t < " + COLS + "; ++t) {\n";
  s += "        uint e = lane + t * L;\n        if (e < " + W + ") {\n          float a = acc[t];\n";
  s += std::string("          for (uint u = 0u; u < cnt; ++u) a += w_sh[u] * ") +
       (dk ? "q_ld((rb + i0 + u) * D + e)" : "dout_ld((rb + i0 + u) * DV + e)") + ";\n";
  s += "          acc[t] = a;\n        }\n      }\n      barrier();\n    }\n  }\n";
  s += "  for (uint t = 0u; t < " + COLS + "; ++t) {\n";
  s += "    uint e = lane + t * L;\n";
  s += "    if (e < " + W + ") out_st(w * " + W + " + e, " + (dk ? "scaled(acc[t])" : "acc[t]") +
       ");\n  }\n}\n";
  return launch(ctx, g, dk ? "attention_grad_k" : "attention_grad_v", std::move(s),
                std::move(bindings));
}

// ---- register tiles (kernels/attention_training_tiled.comp) ----

// R own rows per workgroup and BK other rows per block.
struct TileShape {
  uint64_t rows, block;
  uint32_t lanes() const { return static_cast<uint32_t>(rows / 4 * 16); }
};

uint64_t output_width(const TrainingShape& g) { return g.form == Form::grad_v ? g.dv : g.d; }

// A staged row's stride in vec4s: swizzled rows of 8·n vec4s keep their width, others are
// padded to an odd stride (template at_a/at_b).
uint64_t row_stride(uint64_t width) {
  const uint64_t w4 = width / 4;
  return w4 % 8 == 0 ? w4 : (w4 | 1);
}

// Where the transposed weights go: "other_b" or "other_a" when that block is done with before
// they are written and has room, else an array of their own ("").
std::string weights_home(const TrainingShape& g, const TileShape& t) {
  const uint64_t r4 = t.rows / 4 + 1;
  if (g.form == Form::grad_v) return r4 <= row_stride(g.d) ? "other_a" : "";
  if (g.form == Form::lse) return "other_a";  // none are written
  return r4 <= row_stride(g.dv) ? "other_b" : "";
}

uint64_t tiled_shared_bytes(const TrainingShape& g, const TileShape& t) {
  const uint64_t pa = row_stride(g.d), pb = row_stride(g.dv);
  uint64_t vec4s = (t.rows + t.block) * pa;
  if (has_own_b(g.form)) vec4s += t.rows * pb;
  if (has_other_b(g.form)) vec4s += t.block * pb;
  if (weights_home(g, t).empty()) vec4s += t.block * (t.rows / 4 + 1);
  uint64_t bytes = vec4s * 16;
  if (g.form == Form::lse) bytes += t.rows * 16 * 8;  // red
  return bytes;
}

// The largest tiles whose shared memory the device has; none where a head's width is not a
// multiple of 4 or the output's not of 64 (16 lanes × 4 columns).
std::optional<TileShape> register_tiles_for(const TrainingShape& g, const DeviceTraits& d) {
  if (g.d % 4 != 0 || g.dv % 4 != 0) return std::nullopt;
  if (g.form != Form::lse && output_width(g) % 64 != 0) return std::nullopt;
  for (const TileShape t : {TileShape{32, 64}, TileShape{32, 32}, TileShape{16, 32},
                            TileShape{16, 16}}) {
    if (t.lanes() <= d.max_workgroup_invocations && tiled_shared_bytes(g, t) <= d.max_shared_bytes)
      return t;
  }
  return std::nullopt;
}

KernelLaunch tiled_kernel(const LowerContext& ctx, const TrainingShape& g, const TileShape& t) {
  static const char* const names[] = {"attention_lse_tiled", "attention_grad_q_tiled",
                                      "attention_grad_k_tiled", "attention_grad_v_tiled"};
  const Form f = g.form;
  const uint64_t own_rows = g.own_rows(), own_heads = g.own_heads();
  const uint64_t tiles = (own_rows + t.rows - 1) / t.rows;
  const uint64_t groups = g.batches() * own_heads * tiles;
  KernelLaunch k;
  std::string weights = weights_home(g, t);
  TemplateFields fields{
      {"DECLARATIONS", glsl::require_extensions(declarations(ctx, g, k.bindings),
                                                {"GL_EXT_control_flow_attributes"})},
      {"FORM", std::to_string(static_cast<int>(f))},
      {"CAUSAL", g.attrs.causal ? "1" : "0"},
      {"HAS_MASK", g.attrs.has_mask ? "1" : "0"},
      {"R", std::to_string(t.rows)},
      {"BK", std::to_string(t.block)},
      {"PA", std::to_string(row_stride(g.d))},
      {"PB", std::to_string(row_stride(g.dv))},
      {"W", std::to_string(f == Form::lse ? 64 : output_width(g))},
      {"OWN_ROWS", std::to_string(own_rows)},
      {"OWN_HEADS", std::to_string(own_heads)},
      {"TILES", std::to_string(tiles)},
      {"GROUPS", std::to_string(groups)},
      {"WEIGHTS", weights.empty() ? "weights_sh" : weights},
      {"WEIGHTS_DECLARATION",
       weights.empty() ? "shared vec4 weights_sh[" + ulit(t.block * (t.rows / 4 + 1)) + "];" : ""},
      {"C_ROWS", f == Form::grad_v ? "other_b" : "other_a"},
      {"AT_C", f == Form::grad_v ? "at_b" : "at_a"},
  };
  k.name = names[static_cast<int>(f)];
  fields.merge(role_fields(g, "_ld"));
  k.glsl = fill_kernel_template("attention_training_tiled.comp", fields);
  k.workgroup = {t.lanes(), 1, 1};
  k.groups = glsl::linear_grid(groups * t.lanes(), ctx.device, t.lanes()).groups;
  return k;
}

Lowering lower_training(const LowerContext& ctx, Form form) {
  glsl::require_storage(ctx);
  if (ctx.node.type.numel() == 0) return {};
  const TrainingShape g(ctx, form);
  Lowering low;
  if (auto tensor = attention_training::tensor_training_kernel(ctx, g)) return std::move(*tensor);
  if (auto coop = attention_training::coop_training_kernel(ctx, g)) {
    low.launches.push_back(std::move(*coop));
    return low;
  }
  if (ctx.grad_v_output) {
    throw Error("attention lowering: no kernel for this " + std::string(ctx.node.op_name()) +
                " computes attention_grad_v beside it");
  }
  if (const auto tiles = register_tiles_for(g, ctx.device)) {
    low.launches.push_back(tiled_kernel(ctx, g, *tiles));
    return low;
  }
  switch (form) {
    case Form::lse:
      low.launches.push_back(lse_kernel(ctx, g));
      break;
    case Form::grad_q:
      low.launches.push_back(grad_q_kernel(ctx, g));
      break;
    case Form::grad_k:
    case Form::grad_v:
      low.launches.push_back(grad_kv_kernel(ctx, g));
      break;
  }
  return low;
}

}  // namespace

void register_attention_training_lowerings(LoweringRegistry& r) {
  r.add("attention_lse", [](const LowerContext& ctx) { return lower_training(ctx, Form::lse); });
  r.add("attention_grad_q",
        [](const LowerContext& ctx) { return lower_training(ctx, Form::grad_q); });
  r.add("attention_grad_k",
        [](const LowerContext& ctx) { return lower_training(ctx, Form::grad_k); });
  r.add("attention_grad_v",
        [](const LowerContext& ctx) { return lower_training(ctx, Form::grad_v); });
}

}  // namespace mn::codegen
