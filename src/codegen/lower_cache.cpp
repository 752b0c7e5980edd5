// cache_write on the GPU: one thread per element of the update stores it into its cache row.
// In place (LowerContext::in_place, the planner's choice) that is the only launch and the
// output binding is the cache's own buffer; otherwise a copy of the cache into the output runs
// first. A position outside [0, T) skips its row and is recorded in the node's index slot (the
// reference throws; the session raises mn::IndexError after the step, codegen/index_check.h). A
// thread whose position repeats later in its row of positions stores nothing, so the last
// update wins whatever the scheduling, as in the reference (the scan is free for a decode step,
// L = 1). For a prefill block the scan is the kernel's cost (L/2 loads per element): where the
// lanes of a subgroup share their row (the head dimension spans whole subgroups), they split it.
#include "codegen/glsl.h"
#include "codegen/index_check.h"
#include "codegen/lower_families.h"
#include "codegen/lower_shape.h"
#include "codegen/rope_load.h"
#include "ir/ops/cache.h"

namespace mn::codegen {

namespace {

using glsl::ulit;
using shape_lowering::copy_to_out;
using shape_lowering::per_element;

// Returns from the thread when position t of row prow (at li) repeats later in the row.
std::string later_scan(const std::string& L) {
  return "  for (uint k = li + 1u; k < " + L + "; ++k) {\n"
         "    if (in1_ldi(prow + k) == t) return;\n  }\n";
}

// The same, the scan split over the subgroup's lanes when they all share (prow, li).
std::string shared_later_scan(const std::string& L) {
  return "  if (subgroupAllEqual(prow + li)) {\n"
         "    bool later = false;\n"
         "    for (uint k = li + 1u + gl_SubgroupInvocationID; k < " + L +
         "; k += gl_SubgroupSize) later = later || in1_ldi(prow + k) == t;\n"
         "    if (subgroupAny(later)) return;\n"
         "  } else {\n" + later_scan(L) + "  }\n";
}

// The statements storing update element i at `dst`: as it is, or rotated by the fused rope
// (ctx.rope: in2 holds the rope's positions, broadcast over the update's rows).
std::string store_update(const LowerContext& ctx, const std::string& dst, std::string& library) {
  if (!ctx.rope) return copy_to_out(ctx.node.type.dtype, "in0", "i", dst);
  const Shape& x = ctx.inputs[1].shape;
  const Shape rows(x.begin(), x.end() - 1);
  Shape positions = ctx.inputs[static_cast<size_t>(ctx.rope->positions_input)].shape;
  positions.insert(positions.begin(), rows.size() - positions.size(), 1);
  const auto d = static_cast<uint64_t>(x.back());
  library = rope_load_library(ctx.rope->attrs, d);
  std::string s = glsl::unravel(rows, "q", "c");
  s += "  float rp = float(in2_ldi(" + glsl::broadcast_offset(positions, rows, "c") + "));\n";
  s += "  out_st(" + dst + ", mn_rope(in0_ld(i), in0_ld(i - j + " + rope_partner("j", d) +
       "), j, rp));\n";
  return s;
}

KernelLaunch row_writes(const LowerContext& ctx) {
  const auto v = ops::cache_detail::cache_write_view(ctx.inputs.first(3));
  const std::string L = ulit(v.l), D = ulit(v.d);
  // Bindings: in0 = update, in1 = positions, out = the cache.
  std::string body = "  uint j = i % " + D + ";\n  uint q = i / " + D + ";\n";
  body += "  uint li = q % " + L + ";\n  uint r = q / " + L + ";\n";
  body += "  uint prow = (r / " + ulit(v.rows_per_position_row) + ") * " + L + ";\n";
  body += "  int t = in1_ldi(prow + li);\n";
  body += "  if (t < 0 || t >= " + std::to_string(v.t) + ") {\n";
  body += "    " + report_bad_index(ctx, "prow + li", "t", "j == 0u") + "    return;\n  }\n";
  const bool vote = ctx.device.subgroup_vote;
  if (v.l > 1) body += vote ? shared_later_scan(L) : later_scan(L);
  std::string library;
  body += store_update(ctx, "(r * " + ulit(v.t) + " + uint(t)) * " + D + " + j", library);
  std::vector<int> inputs{1, 2};
  if (ctx.rope) inputs.push_back(ctx.rope->positions_input);
  KernelLaunch k = per_element(ctx, ctx.rope ? "cache_write+prologue[rope_positions]" : "cache_write",
                               inputs, body, static_cast<uint64_t>(ctx.inputs[1].numel()),
                               /*index_slot=*/true, library);
  if (v.l > 1 && vote) {
    k.glsl = glsl::require_extensions(
        std::move(k.glsl), {"GL_KHR_shader_subgroup_basic", "GL_KHR_shader_subgroup_vote"});
  }
  return k;
}

Lowering lower_cache_write(const LowerContext& ctx) {
  Lowering l;
  if (!ctx.in_place) {
    l.launches.push_back(per_element(ctx, "cache_write_copy", {0},
                                     copy_to_out(ctx.node.type.dtype, "in0", "i"),
                                     static_cast<uint64_t>(ctx.node.type.numel())));
  }
  l.launches.push_back(row_writes(ctx));
  if (ctx.check_indices) {
    const auto v = ops::cache_detail::cache_write_view(ctx.inputs.first(3));
    l.index_check = IndexCheck{2, v.t, "position", "positions",
                               " for a cache of shape " + shape_str(ctx.inputs[0].shape)};
  }
  return l;
}

}  // namespace

void register_cache_lowerings(LoweringRegistry& r) { r.add("cache_write", lower_cache_write); }

}  // namespace mn::codegen
