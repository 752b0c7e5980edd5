#pragma once
// Pieces of the attention-family lowerings split across files.
#include <optional>
#include <string>

#include "codegen/kernel.h"

namespace mn::codegen {

struct RopeLoad;

// The new slot of each cache row, read by a cached_attention from the cache_writes' updates:
// inputs k_update and v_update (one row of D, resp. DV, per cache row), stored at the position in
// input `positions` (cache_write's), the key rotated first by `k_rope` where the write rotates it.
struct CacheAppendLoad {
  int k_update = -1, v_update = -1, positions = -1;
  const RopeLoad* k_rope = nullptr;
};

}  // namespace mn::codegen

namespace mn::codegen::attention_lowering {

// rope (backward = false) and rope_backward (lower_attention_rope.cpp).
Lowering lower_rope(const LowerContext& ctx, bool backward);
// rope_positions and rope_positions_backward (lower_attention_rope.cpp).
Lowering lower_rope_positions(const LowerContext& ctx, bool backward);
// GLSL: `shared float red[lanes]` and float wg_sum(float) / wg_max(float) over a workgroup of
// `lanes` (a GLSL expression, a power of two) invocations; the max ignores NaN as the reference's
// std::max does (lower_attention.cpp).
std::string workgroup_reductions(const std::string& lanes);
// Whether cached_attention's row kernel takes ctx.rope (its query rotated as it is loaded):
// the kernel is not tiled and keeps the query row in shared memory (lower_attention.cpp).
bool row_kernel_reads_rope(const LowerContext& ctx);
// Where a decoding cached_attention's split row kernel stores its partials as its output
// (LowerContext::attention_partials): query row r's key range p at (r · splits + p) · (2 + dv)
// floats, its maximum score, its sum of exp(score - maximum) and its dv values weighted by those
// exponentials, unnormalised; a range holding no visible key has maximum -inf, sum 0 and zero
// values. After every row's ranges, at rows · splits · (2 + dv) + r, row r's count of ranges
// holding keys (a float; the first ranges, at least one): a reader combines only those, however
// long the cache. The output is head h's values combined over its ranges, row r = h.
struct PartialsLayout {
  uint64_t rows = 0, splits = 0, dv = 0;
  uint64_t floats() const { return 2 + dv; }                           // of one range's partial
  uint64_t counts_offset() const { return rows * splits * floats(); }  // in floats
  uint64_t bytes() const { return (counts_offset() + rows) * sizeof(float); }
};
// The layout for ctx where its kernel is the split row kernel of one query per row (decoding);
// nullopt otherwise (one workgroup a row, tiled or tensor-core kernels).
std::optional<PartialsLayout> partials_of(const LowerContext& ctx);
// Whether cached_attention's lowering takes ctx.append: its quad kernel runs (decoding), and a
// rotated key update shares the query's rotation where the query is rotated too.
bool takes_cache_append(const LowerContext& ctx);

// Whether scaled_dot_product_attention's kernel for `ctx` can store each query row's
// log-sum-exp beside its output (LowerContext::saved_lse): the tensor-core (both),
// register-tiled and tiled kernels do (not the per-row and split-key ones). The tensor-core
// kernels then round their operands to bf16 (not f16) so that their scores are those of the bf16
// training kernels.
bool saves_lse(const LowerContext& ctx);
// Whether the attention's forward kernel for `ctx` is a tensor-core one (subgroup matrices, or
// tensor-addressed workgroup matrices, lower_attention_tensor.h).
bool forward_on_tensor_cores(const LowerContext& ctx);

struct AttentionShape;
// Whether the tensor-core kernel serves these queries (lower_attention_coop.cpp): the device has
// cooperative matrices and the heads' sizes and the prompt's length suit it; and the kernel.
bool coop_attention_fits(const AttentionShape& g, const DeviceTraits& d);
KernelLaunch coop_attention_kernel(const LowerContext& ctx, const AttentionShape& g);
// Its grid: a workgroup per 64 query rows of a head.
uint64_t coop_attention_workgroups(const AttentionShape& g);

}  // namespace mn::codegen::attention_lowering
