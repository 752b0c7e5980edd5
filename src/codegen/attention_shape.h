#pragma once
// The operands of scaled_dot_product_attention and cached_attention as the attention kernels
// see them, and the GLSL pieces every form of the forward kernel shares: buffers and sizes,
// locating a head, the keys a row sees, a score, a tile's reach.
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "ir/ops/attention.h"

namespace mn::codegen::attention_lowering {

// The operands padded to a common rank R >= 3, the sizes the kernel bakes in (the op's
// inference has validated them) and the form: scaled_dot_product_attention's attributes, or
// cached_attention's as those of its unmasked, non-causal form plus the positions operand.
struct AttentionShape {
  size_t rank = 3;
  Shape q, k, v, mask, batch, scores;
  Shape positions, rows;  // positions padded to rank R - 1, broadcast to rows = batch + [Hq, Lq]
  uint64_t hq = 1, hkv = 1, lq = 1, lk = 1, d = 1, dv = 1;
  AttentionAttrs attrs;
  bool has_positions = false;

  explicit AttentionShape(const LowerContext& ctx);
  uint64_t heads() const { return static_cast<uint64_t>(numel(batch)) * hq; }
};

// Buffers, sizes and helpers the kernels share; sets `bindings` to the operands and the output,
// or with `partials`, scratch buffer 0 as the f32 buffer `part` beside it (and the counters), or
// with ctx.attention_partials too, the output as `part` alone.
std::string declarations(const LowerContext& ctx, const AttentionShape& g, bool has_mask,
                         std::vector<KernelBinding>& bindings, bool partials = false);
// Statements locating head (b, h) of the scores given `b` and `h`: qb, kb, vb, the bases of its
// q, k and v heads; with a mask, mb, the mask's offset of score (row, key 0), for the row in
// the GLSL expression `row`.
std::string head_offsets(const AttentionShape& g, bool has_mask, const std::string& row);
// The keys query row `row` sees (a GLSL uint expression): all, the causal prefix, or those up
// to its position (none when negative). head_offsets defines pb for the positions.
std::string visible_expr(const AttentionShape& g, const std::string& row);
// GLSL: float scaled(float x), a raw score q·k scaled as the op's attributes say (an explicit
// scale as the output's dtype holds it; by default divided by sqrt(d), as the reference).
std::string scale_function(const LowerContext& ctx, const AttentionAttrs& a, uint64_t d);
// The score of key `jj` from `dot` (q . k): scaled, plus the mask.
std::string score_expr(const LowerContext& ctx, const AttentionShape& g, const AttentionAttrs& a,
                       const std::string& jj, const std::string& mask_base = "mb");
// GLSL: `reach`, the keys some row of the tile of `rows` query rows from i0 sees: all, the
// causal prefix, or, where each row has its own position, the largest visible count, one lane
// per row loading its position, all at once (a loop over the rows waited for one position load
// after another; the shared reach_sh is the kernel's to declare). Needs `tid`.
std::string tile_reach(const AttentionShape& g, const std::string& rows);

// The binding of output 1, the rows' log-sum-exp, where the attention saves it
// (LowerContext::saved_lse, stored through out1_st), appended to the kernel's; empty otherwise.
std::string saved_lse_binding(const LowerContext& ctx, KernelLaunch& k);
// The statement storing row `row`'s log-sum-exp from its maximum (or any reference the sum was
// taken against) `m` and sum `l` where saved: -inf where the row sees no key or every one is
// masked, as attention_lse's reference; empty where not saved.
std::string saved_lse_store(const LowerContext& ctx, const std::string& indent,
                            const std::string& row, const std::string& m, const std::string& l);

}  // namespace mn::codegen::attention_lowering
