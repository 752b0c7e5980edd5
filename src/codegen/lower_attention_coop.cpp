// Attention over prompts on tensor cores: the flash-attention kernel of
// kernels/attention_coop.comp, filled for one node. Queries, keys, values and probabilities are
// rounded to f16 for the matrix units (as the cooperative matmul rounds f32 operands); scores,
// the softmax and the output accumulate in f32.
//
// It serves devices with subgroup-scope cooperative matrices (DeviceTraits::coop, subgroups of
// 32), heads of 16 to 128 in steps of 16 and at least 32 query rows (fewer leave most of the
// 64-row tile idle: decoding keeps its split-key kernels); lower_attention.cpp decides when.
#include <functional>
#include <optional>
#include <string>

#include "codegen/attention_shape.h"
#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_attention.h"

namespace mn::codegen::attention_lowering {

namespace {

using glsl::ulit;

constexpr uint64_t kRows = 64, kLanes = 128, kMinRows = 32, kMaxHead = 128;

struct CoopTiling {
  uint64_t keys = 64;  // keys per block (BC)
  uint64_t kv_units = 0;
};

// 16-byte units of the staged query tile or key/value block, and the shared bytes in all.
uint64_t kv_units(const AttentionShape& g, uint64_t keys) {
  const uint64_t ks = g.d / 8 + 1, vs = g.dv / 8 + 1;
  return std::max(keys * (ks + vs), kRows * ks);
}
uint64_t shared_bytes(const AttentionShape& g, uint64_t keys) {
  return kv_units(g, keys) * 16 + kRows * keys * (4 + 2) + 128 * 4 +
         (g.has_positions ? kRows * 4 : 0);
}

std::optional<CoopTiling> coop_tiling_for(const AttentionShape& g, const DeviceTraits& d) {
  if (!d.coop || d.coop_attention == DeviceTraits::Choice::never || d.subgroup_size != 32 ||
      !d.subgroup_vote) {
    return std::nullopt;
  }
  if (d.max_workgroup_invocations < kLanes) return std::nullopt;
  if (g.d % 16 != 0 || g.dv % 16 != 0 || g.d > kMaxHead || g.dv > kMaxHead) return std::nullopt;
  if (g.lq < kMinRows) return std::nullopt;
  for (uint64_t keys : {64u, 32u, 16u}) {
    // Every lane loads whole 16-byte units of each block.
    if ((keys * g.d / 8) % kLanes != 0 || (keys * g.dv / 8) % kLanes != 0) continue;
    if (shared_bytes(g, keys) > d.max_shared_bytes) continue;
    return CoopTiling{keys, kv_units(g, keys)};
  }
  return std::nullopt;
}

// `body(i)` for i = 0 .. count - 1, i a literal.
template <typename F>
std::string each(uint64_t count, F body) {
  std::string s;
  for (uint64_t i = 0; i < count; ++i) s += body(i);
  return s;
}

std::string load_query(const AttentionShape& g) {
  return each(g.d / 16, [](uint64_t e) {
    const std::string q = "q" + std::to_string(e);
    return "  F16 " + q + ";\n  coopMatLoadNV(" + q + ", kv, sg * 16u * KS + " + ulit(2 * e) +
           ", KS, false);\n";
  });
}

std::string output_matrices(const AttentionShape& g) {
  return each(g.dv / 16,
              [](uint64_t f) { return "  F32 o" + std::to_string(f) + " = F32(0.0);\n"; });
}

// S = Q·Kᵀ for each 16 keys of the block, column-major into the subgroup's part of sc.
std::string scores(const AttentionShape& g, const CoopTiling& t) {
  return each(t.keys / 16, [&](uint64_t c) {
    std::string s = "    {\n      F32 s = F32(0.0);\n      F16 kf;\n";
    s += each(g.d / 16, [&](uint64_t e) {
      return "      coopMatLoadNV(kf, kv, " + ulit(c * 16) + " * KS + " + ulit(2 * e) +
             ", KS, true);\n      s = coopMatMulAddNV(q" + std::to_string(e) + ", kf, s);\n";
    });
    return s + "      coopMatStoreNV(s, sc, scr + " + ulit(c * 256) + ", 16u, true);\n    }\n";
  });
}

// Output matrix o<f> through the subgroup's part of sc, column-major: `lanes` runs with the
// lane's columns 2c + par of its row r at sc[scr + (2c + par) * 16 + r], c = 0 .. 7.
std::string through_shared(
    uint64_t f, const std::string& indent,
    const std::function<std::string(uint64_t c, const std::string& at)>& lanes) {
  const std::string o = "o" + std::to_string(f);
  std::string s = indent + "coopMatStoreNV(" + o + ", sc, scr, 16u, true);\n";
  s += indent + "subgroupMemoryBarrierShared();\n" + indent + "subgroupBarrier();\n";
  s += each(8,
            [&](uint64_t c) { return lanes(c, "sc[scr + " + ulit(32 * c) + " + par * 16u + r]"); });
  return s + indent + "subgroupMemoryBarrierShared();\n" + indent + "subgroupBarrier();\n";
}

// Rows whose reference moved: their outputs times alpha.
std::string rescale(const AttentionShape& g) {
  return each(g.dv / 16, [&](uint64_t f) {
    const std::string o = "o" + std::to_string(f);
    return through_shared(
               f, "      ",
               [](uint64_t, const std::string& at) { return "      " + at + " *= alpha;\n"; }) +
           "      coopMatLoadNV(" + o + ", sc, scr, 16u, true);\n";
  });
}

// O += P·V: the block's probabilities as A-matrices, the values' B-matrices from shared memory.
std::string accumulate(const AttentionShape& g, const CoopTiling& t) {
  std::string s = each(t.keys / 16, [](uint64_t kk) {
    const std::string p = "pf" + std::to_string(kk);
    return "    F16 " + p + ";\n    coopMatLoadNV(" + p + ", pr, scr + " + ulit(kk * 256) +
           ", 16u, true);\n";
  });
  s += "    F16 vf;\n";
  s += each(g.dv / 16, [&](uint64_t f) {
    const std::string o = "o" + std::to_string(f);
    return each(t.keys / 16, [&](uint64_t kk) {
      return "    coopMatLoadNV(vf, kv, VOFF + " + ulit(kk * 16) + " * VS + " + ulit(2 * f) +
             ", VS, false);\n    " + o + " = coopMatMulAddNV(pf" + std::to_string(kk) + ", vf, " +
             o + ");\n";
    });
  });
  return s;
}

// Each lane's columns of its row divided by the row's sum, stored.
std::string store(const AttentionShape& g) {
  return each(g.dv / 16, [&](uint64_t f) {
    return through_shared(f, "  ", [&](uint64_t c, const std::string& at) {
      return "  if (i < LQ) out_st(ob + " + ulit(f * 16 + 2 * c) + ", " + at + " * inv);\n";
    });
  });
}

KernelLaunch coop_kernel(const LowerContext& ctx, const AttentionShape& g, const CoopTiling& t) {
  const AttentionAttrs& a = g.attrs;
  KernelLaunch k;
  std::string decl = declarations(ctx, g, a.has_mask, k.bindings);
  decl = glsl::require_extensions(
      decl, {"GL_EXT_shader_explicit_arithmetic_types_float16", "GL_KHR_memory_scope_semantics",
             "GL_NV_cooperative_matrix", "GL_KHR_shader_subgroup_basic",
             "GL_KHR_shader_subgroup_vote", "GL_EXT_control_flow_attributes"});
  for (uint32_t i = 0; i < 3; ++i) {
    decl += glsl::quad_view(i, ctx.inputs[i].dtype, i == 0 ? "q" : i == 1 ? "k" : "v");
  }
  // Saving the log-sum-exp for the bf16 training kernels: the operands rounded to bf16 (exact
  // in f16 within its range), so the scores are theirs.
  decl += saved_lse_binding(ctx, k);
  if (ctx.saved_lse) decl += glsl::half_conversions();
  const uint64_t tiles = (g.lq + kRows - 1) / kRows;  // per head
  const size_t R = g.rank;
  const uint64_t mask_row_stride =
      a.has_mask && g.mask[R - 2] != 1 ? static_cast<uint64_t>(g.mask[R - 1]) : 0;
  const TemplateFields fields{
      {"DECLARATIONS", decl},
      {"HAS_MASK", a.has_mask ? "1" : "0"},
      {"SAVES_LSE", ctx.saved_lse ? "1" : "0"},
      {"CAUSAL_ORDER", a.causal || g.has_positions ? "1" : "0"},
      {"BC", std::to_string(t.keys)},
      {"TILES", std::to_string(tiles)},
      {"HEADS", std::to_string(g.heads())},
      {"MASK_ROW_STRIDE", std::to_string(mask_row_stride)},
      {"KV_UNITS", std::to_string(t.kv_units)},
      {"REACH_SHARED", g.has_positions ? "shared uint reach_sh[BR];" : ""},
      {"HEAD_OFFSETS", head_offsets(g, a.has_mask, "0u")},
      {"REACH", tile_reach(g, "BR")},
      {"LOAD_QUERY", load_query(g)},
      {"VISIBLE", visible_expr(g, "i")},
      {"OUTPUT_MATRICES", output_matrices(g)},
      {"RESCALE", rescale(g)},
      {"SCORES", scores(g, t)},
      {"SCORE", score_expr(ctx, g, a, "jj", "mbr")},
      {"ACCUMULATE", accumulate(g, t)},
      {"STORE", store(g)},
      {"LSE_STORE", saved_lse_store(ctx, "    ", "bh * LQ + i", "ref", "sum")},
  };
  k.name = "attention_coop";
  k.glsl = fill_kernel_template("attention_coop.comp", fields);
  k.workgroup = {kLanes, 1, 1};
  k.groups = glsl::linear_grid(coop_attention_workgroups(g) * kLanes, ctx.device, kLanes).groups;
  return k;
}

}  // namespace

bool coop_attention_fits(const AttentionShape& g, const DeviceTraits& d) {
  return coop_tiling_for(g, d).has_value();
}

uint64_t coop_attention_workgroups(const AttentionShape& g) {
  return g.heads() * ((g.lq + kRows - 1) / kRows);
}

KernelLaunch coop_attention_kernel(const LowerContext& ctx, const AttentionShape& g) {
  const std::optional<CoopTiling> t = coop_tiling_for(g, ctx.device);
  if (!t) throw Error("attention lowering: these heads do not suit the tensor-core kernel");
  return coop_kernel(ctx, g, *t);
}

}  // namespace mn::codegen::attention_lowering
