#include "codegen/attention_shape.h"

#include <algorithm>
#include <cmath>

#include "codegen/glsl.h"
#include "ir/ops/cache.h"
#include "ir/ops/common.h"

namespace mn::codegen::attention_lowering {

namespace {

using glsl::ulit;

Shape pad_to(const Shape& s, size_t rank) {
  Shape p(rank - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  return p;
}
Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 3); }

// " * scale" or " / sqrt(d)": an explicit scale as the output's dtype holds it; the default
// divides by sqrt(d), as the reference.
std::string scaling(const LowerContext& ctx, const AttentionAttrs& a, uint64_t d) {
  return a.scale > 0.0 ? " * " + glsl::float_literal(round_to_dtype(a.scale, ctx.node.type.dtype))
                       : " / " + glsl::float_literal(std::sqrt(static_cast<double>(d)));
}

}  // namespace

AttentionShape::AttentionShape(const LowerContext& ctx) {
  const Attrs& a = ctx.node.attrs;
  has_positions = a.is<CachedAttentionAttrs>();
  attrs = has_positions ? AttentionAttrs{false, a.as<CachedAttentionAttrs>().scale, false}
                        : a.as<AttentionAttrs>();
  const std::span<const TensorType> in = ctx.inputs;
  const bool has_mask = attrs.has_mask;
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
  if (has_positions) {
    rows = Shape(scores.begin(), scores.end() - 1);
    positions = pad_to(in[3].shape, rank - 1);
  }
}

std::string declarations(const LowerContext& ctx, const AttentionShape& g, bool has_mask,
                         std::vector<KernelBinding>& bindings, bool partials) {
  std::string s = glsl::header();
  const char* names[] = {"q", "k", "v", g.has_positions ? "pos" : "mask"};
  const uint32_t operands = has_mask || g.has_positions ? 4 : 3;
  for (uint32_t i = 0; i < operands; ++i) {
    s += glsl::buffer(i, ctx.inputs[i].dtype, names[i], true);
    bindings.push_back({ArgRef::input(static_cast<int>(i)), false});
  }
  if (partials && ctx.attention_partials) {
    // The partials are the output: the product reading it combines them.
    s += glsl::buffer(operands, DType::f32, "part", false);
    bindings.push_back({ArgRef::output(), true});
  } else if (partials) {
    // Coherent: the last workgroup of a row reads what the others stored (row_kernel).
    std::string part = glsl::buffer(operands, DType::f32, "part", false);
    part.insert(part.find("buffer Buffer"), "coherent ");
    s += part;
    bindings.push_back({ArgRef::scratch(0), true});
    s += glsl::buffer(operands + 1, ctx.node.type.dtype, "out", false);
    bindings.push_back({ArgRef::output(), true});
    s += "layout(std430, set = 0, binding = " + std::to_string(operands + 2) +
         ") buffer Counters { uint done[]; };\n";
    bindings.push_back({ArgRef::counters(0), true});
  } else {
    s += glsl::buffer(operands, ctx.node.type.dtype, "out", false);
    bindings.push_back({ArgRef::output(), true});
  }
  s += "const uint HQ = " + ulit(g.hq) + ", LQ = " + ulit(g.lq) + ", D = " + ulit(g.d) +
       ", LK = " + ulit(g.lk) + ", DV = " + ulit(g.dv) + ", GROUP = " + ulit(g.hq / g.hkv) + ";\n";
  s += "float mn_inf() { return uintBitsToFloat(0x7f800000u); }\n";
  return s;
}

std::string head_offsets(const AttentionShape& g, bool has_mask, const std::string& row) {
  const size_t R = g.rank;
  std::string s = "  uint hk = h / GROUP;\n" + glsl::unravel(g.batch, "b", "c");
  const auto batch_offset = [&](const Shape& padded, uint64_t block) {
    return "(" + glsl::broadcast_offset(leading(padded), g.batch, "c") + ") * " + ulit(block);
  };
  s += "  uint qb = " + batch_offset(g.q, g.hq * g.lq * g.d) + " + h * LQ * D;\n";
  s += "  uint kb = " + batch_offset(g.k, g.hkv * g.lk * g.d) + " + hk * LK * D;\n";
  s += "  uint vb = " + batch_offset(g.v, g.hkv * g.lk * g.dv) + " + hk * LK * DV;\n";
  if (has_mask) {
    s += "  uint c" + std::to_string(R - 3) + " = h, c" + std::to_string(R - 2) + " = " + row +
         ", c" + std::to_string(R - 1) + " = 0u;\n";
    s += "  uint mb = " + glsl::broadcast_offset(g.mask, g.scores, "c") + ";\n";
  }
  if (g.has_positions) {
    s += "  uint c" + std::to_string(R - 3) + " = h, c" + std::to_string(R - 2) + " = 0u;\n";
    s += "  uint pb = " + glsl::broadcast_offset(g.positions, g.rows, "c") + ";\n";
  }
  return s;
}

std::string visible_expr(const AttentionShape& g, const std::string& row) {
  if (g.has_positions) {
    const std::string stride = g.positions[g.rank - 2] == 1 ? "0u" : "1u";
    return "min(LK, uint(max(pos_ldi(pb + (" + row + ") * " + stride + "), -1) + 1))";
  }
  return g.attrs.causal ? "min(LK, " + row + " + 1u)" : "LK";
}

std::string scale_function(const LowerContext& ctx, const AttentionAttrs& a, uint64_t d) {
  return "float scaled(float x) { return x" + scaling(ctx, a, d) + "; }\n";
}

std::string score_expr(const LowerContext& ctx, const AttentionShape& g, const AttentionAttrs& a,
                       const std::string& jj, const std::string& mask_base) {
  std::string s = "dot" + scaling(ctx, a, g.d);
  if (a.has_mask) {
    s += " + mask_ld(" + mask_base + " + " + jj + " * " + ulit(g.mask[g.rank - 1] == 1 ? 0 : 1) +
         ")";
  }
  return s;
}

std::string tile_reach(const AttentionShape& g, const std::string& rows) {
  if (!g.has_positions) {
    return std::string("  uint reach = ") +
           (g.attrs.causal ? "min(LK, min(i0 + " + rows + ", LQ))" : "LK") + ";\n";
  }
  std::string s = "  if (tid < " + rows + ") reach_sh[tid] = i0 + tid < LQ ? " +
                  visible_expr(g, "(i0 + tid)") + " : 0u;\n";
  s += "  barrier();\n  uint reach = 0u;\n";
  s += "  for (uint r = 0u; r < " + rows + "; ++r) reach = max(reach, reach_sh[r]);\n";
  return s;
}

std::string saved_lse_binding(const LowerContext& ctx, KernelLaunch& k) {
  if (!ctx.saved_lse) return "";
  k.bindings.push_back({ArgRef::output(1), true});
  return glsl::buffer(static_cast<uint32_t>(k.bindings.size() - 1), *ctx.saved_lse, "out1", false);
}

std::string saved_lse_store(const LowerContext& ctx, const std::string& indent,
                            const std::string& row, const std::string& m, const std::string& l) {
  if (!ctx.saved_lse) return "";
  return indent + "out1_st(" + row + ", " + m + " == -mn_inf() ? -mn_inf() : " + m + " + log(" + l +
         "));\n";
}

}  // namespace mn::codegen::attention_lowering
