// Tensor-addressed workgroup-scope matmul: fills kernels/matmul_tensor.comp.
//
// f16 and bf16 operands are read in place, at any extent (clamped loads give zeros past the
// edges); bf16 products need VK_KHR_shader_bfloat16's cooperative matrices. bf16 products have
// no other tensor-core kernel, so they take this one below a full wave of tiles too.
// f32 operands stay on the workgroup-scope kernel (lower_matmul_coop_wg.h): through their packed
// copies this kernel measured no faster at 4096³-8192³ and 2.8× slower at 256×576×49152, where
// undoing the packing's scale and storing f32 tiles weigh against a short K loop (docs/perf.md).
#include "codegen/lower_matmul_tensor.h"

#include <algorithm>
#include <array>
#include <limits>

#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/store_rewrites.h"

namespace mn::codegen {
namespace {

// Measured on the H200 (docs/perf.md, "Tensor-addressed matmul"), smallest first.
// f16 operands, TFLOP/s at 2048³ / 4096³ / 8192³ against the workgroup-scope kernel's 162 / 224
// / 259: t128x128k32 232 / 263 / 283, t128x256k32u4 249 / 291 / 318. Slower, and so not
// offered: K steps of 64 (with or without 2 per iteration), of 16 with 8 per iteration,
// 128×256 with 1 step per iteration, 128×128 with 4, and 256×128 with 4.
// t64x64k32 and the smaller tiles serve bf16 products too small to fill the device with the
// larger tiles (a prompt's 512 × 576 projections: 72 tiles of 64 × 64 for 132 multiprocessors).
// Their K loops are short and wait on each step's loads: steps of 64 halve the waits (SmolLM2's
// bf16 training step at 1 × 256 took 13.1 ms against 15.4 with steps of 32, its 512-token
// prompt 5.40 against 5.87 ms of GPU time; steps of 192 took 16.4 and 7.0), so where K allows
// both the longer step is taken.
// Entries marked forced_only are offered to MN_COOP_TENSOR_TILE until measured against the others.
constexpr std::array<TensorTile, 14> kTiles{{
    {"t32x32k32", 32, 32, 32, 1, 32, true},
    {"t32x32k64", 32, 32, 64, 1, 32, true},
    {"t32x64k32", 32, 64, 32, 1, 64, true},
    {"t32x64k64", 32, 64, 64, 1, 64, true},
    {"t64x64k32", 64, 64, 32, 1, 64, true},
    {"t64x64k64", 64, 64, 64, 1, 64, true},
    {"t64x64k64w128", 64, 64, 64, 1, 128, true, true},
    {"t64x128k64w128", 64, 128, 64, 1, 128, true, true},
    {"t128x128k32", 128, 128, 32, 1, 128},
    {"t128x128k32w256", 128, 128, 32, 1, 256, false, true},
    {"t128x128k64w256", 128, 128, 64, 1, 256, false, true},
    {"t128x128k32u4w256", 128, 128, 32, 4, 256, false, true},
    {"t128x256k32u4", 128, 256, 32, 4, 256},
    {"t128x256k64u4", 128, 256, 64, 4, 256, false, true},
}};

using glsl::ulit;

bool tile_supported(const TensorTile& t, const DeviceTraits& d, DType operands) {
  return workgroup_tile_fits(
      t.bm, t.bn, t.bk, t.invocations,
      operands == DType::bf16 ? d.coop_wg_bf16_granularity : d.coop_wg_granularity, d);
}

// K splits for a grid of `groups` tiles that fills at most half the device: enough workgroups
// to fill it, each split at least kMinSplitSteps K steps long (shorter ones spend more on the
// partials than they save), at most kMaxSplits. With DeviceTraits::coop_tensor_long_split, a
// grid that fills the device but walks a long K loop (at least twice kLongSplitSteps steps) is
// split too, into splits of at least kLongSplitSteps steps while the grid stays within
// kLongSplitFills fills of the device: a workgroup's steps each wait on their loads, and the 1 ×
// 256 training step's products of K = 1536 (144 workgroups of 32 × 32, 24 steps) took 27.6 µs each
// against 15 for K = 576 (docs/perf.md). Only tiles of at most kLongSplitArea outputs split so:
// with the 128-row tiles split too, the 8 × 512 step took 85.5 ms against 63.1 (H100); with the
// 64 × 64 tiles of its weight gradients split in two, 57.0-57.2 against 56.3-56.5 with 32 × 64
// and 56.8-56.9 unsplit, while the 1 × 256 step's 32 × 32 tiles gain 2 % split.
// DeviceTraits::coop_tensor_split_k overrides the count.
constexpr int64_t kMinSplitSteps = 4, kMaxSplits = 16;
constexpr int64_t kLongSplitSteps = 8, kLongSplitFills = 4, kLongSplitArea = 32 * 64;
// K from which a product with few outputs still fills the device, split.
constexpr int64_t kLongK = 512;

int split_count(const MatmulGeometry& g, const TensorTile& t, int64_t groups,
                const DeviceTraits& d) {
  const int64_t steps = (g.k + t.bk - 1) / t.bk;
  int64_t s = d.coop_tensor_split_k;
  if (s == 0) {
    const int64_t want = d.groups_to_fill();
    if (groups * 2 <= want) {
      s = std::min({(want + groups - 1) / groups, steps / kMinSplitSteps, kMaxSplits});
    } else if (d.coop_tensor_long_split && steps >= 2 * kLongSplitSteps &&
               groups < kLongSplitFills * want && int64_t{t.bm} * t.bn <= kLongSplitArea) {
      s = std::min({kLongSplitFills * want / groups, steps / kLongSplitSteps, kMaxSplits});
    } else {
      return 1;
    }
  }
  s = std::clamp<int64_t>(s, 1, std::max<int64_t>(steps, 1));
  const int64_t per = (steps + s - 1) / s;  // K steps per split
  return static_cast<int>((steps + per - 1) / per);  // so that no split is empty
}

bool fits_u32(const MatmulGeometry& g) {
  const int64_t u32_max = std::numeric_limits<uint32_t>::max() - 16;
  return numel(g.a_batch) * g.m * g.k <= u32_max && numel(g.b_batch) * g.k * g.n <= u32_max &&
         numel(g.out_batch) * g.m * g.n <= u32_max;
}

}  // namespace

std::span<const TensorTile> tensor_tiles() { return kTiles; }

std::optional<int> choose_tensor_tile(const LowerContext& ctx, const MatmulGeometry& g,
                                      int64_t batch, bool sibling) {
  const DeviceTraits& d = ctx.device;
  const DType operands = ctx.inputs[0].dtype;
  const int64_t want = d.groups_to_fill();
  // The largest tile whose grid fills the device (the first of equal size). Below a full wave
  // the subgroup-scope kernel's smaller tiles are faster for f16 (docs/perf.md); bf16 has no
  // such kernel and takes the tile with most workgroups.
  std::optional<int> best, most;
  int64_t best_area = 0, most_groups = 0;
  for (int i = 0; i < static_cast<int>(kTiles.size()); ++i) {
    const TensorTile& t = kTiles[static_cast<size_t>(i)];
    if (!tile_supported(t, d, operands) || !fits_u32(g)) continue;
    if (t.bf16_only && operands != DType::bf16) continue;
    if (sibling && !tensor_tile_takes_sibling(t, d)) continue;
    if (!d.coop_tensor_tile.empty()) {
      if (d.coop_tensor_tile == t.name) return i;
      continue;
    }
    if (t.forced_only) continue;
    const int64_t groups = ((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn) * batch;
    const int64_t area = int64_t{t.bm} * t.bn;
    // Of equal tiles, the longest K step that divides K: fewer steps, each waiting on its
    // loads, and no clamped edge step.
    auto longer_step = [&](const std::optional<int>& other) {
      const TensorTile& o = kTiles[static_cast<size_t>(*other)];
      return g.k % t.bk == 0 && (t.bk > o.bk || g.k % o.bk != 0);
    };
    if (groups >= want && (area > best_area || (area == best_area && best && longer_step(best)))) {
      best = i;
      best_area = area;
    }
    if (groups > most_groups || (groups == most_groups && most && longer_step(most))) {
      most = i;
      most_groups = groups;
    }
  }
  return best || operands != DType::bf16 ? best : most;
}

std::string tensor_matmul_rejection(const LowerContext& ctx, const MatmulGeometry& g,
                                    int64_t batch) {
  const DeviceTraits& d = ctx.device;
  if (!d.coop) return "the device has no usable cooperative matrices";
  if (!d.coop_tensor) return "no tensor-addressed cooperative matrices (or no current glslang)";
  const DType a = ctx.inputs[0].dtype, b = ctx.inputs[1].dtype;
  if ((a != DType::f16 && a != DType::bf16) || b != a) {
    return "operands are not both f16 or both bf16 (f32 operands take the workgroup-scope "
           "kernel)";
  }
  const DType out = ctx.node.type.dtype;
  if (out != DType::f32 && out != a) return "the result is neither f32 nor the operands' dtype";
  // The subgroup-scope thresholds (lower_matmul_coop.h), over the whole batch (attention's
  // products per head are small one by one): below them the scalar kernel wins. Few outputs
  // over a long K split it (SmolLM2's 256 × 192 key/value projections, K = 576: the scalar
  // kernel measured 38.7 µs in the step's profile, the 256 × 576 products split 4 ways 25).
  const bool long_k = g.k >= kLongK;
  if (g.m < 32 || g.n < 32 || (g.m * g.n * batch < kCoopMinOutputs && !long_k) ||
      g.m * g.n * g.k * batch < kCoopMinMacs) {
    return "product too small for tensor cores";
  }
  if (!choose_tensor_tile(ctx, g, batch)) return "no tensor-addressed tile fits";
  return {};
}

namespace {

// The extras the kernel takes: a sibling product whose matrix has B's dtype, and nothing else.
bool sibling_only(const GemvExtras& x, DType b) {
  return !x.norm && x.stacked.empty() && x.sibling_input >= 0 && x.sibling_dtype == b;
}

}  // namespace

bool tensor_tile_takes_sibling(const TensorTile& t, const DeviceTraits& device) {
  const uint64_t area = static_cast<uint64_t>(t.bm) * static_cast<uint64_t>(t.bn);
  return area <= uint64_t{kSiblingAccumulatorPerInvocation} * t.invocations &&
         area * sizeof(float) <= device.max_shared_bytes;
}

namespace {

std::optional<int64_t> permuted_row_stride(const LowerContext& ctx, const MatmulGeometry& g,
                                           const TensorTile& t) {
  if (!ctx.stored_shape || !ctx.stored_perm) return std::nullopt;
  const Shape& r = *ctx.stored_shape;
  const std::vector<int64_t>& perm = *ctx.stored_perm;
  const size_t nb = g.out_batch.size();
  if (perm.size() != r.size() || r.size() < nb + 2 || perm.back() != int64_t(r.size()) - 1)
    return std::nullopt;
  if (!std::equal(g.out_batch.begin(), g.out_batch.end(), r.begin()) || r[nb] != g.m)
    return std::nullopt;
  int64_t n = 1;
  for (size_t i = nb + 1; i < r.size(); ++i) n *= r[i];
  if (n != g.n || r.back() % t.bn != 0) return std::nullopt;
  return permuted_axis_strides(r, perm)[nb];  // M's axis is r[nb]
}

}  // namespace

std::optional<int64_t> tensor_permuted_row_stride(const LowerContext& ctx) {
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  if (!tensor_matmul_rejection(ctx, g, batch).empty()) return std::nullopt;
  const TensorTile& t = kTiles[static_cast<size_t>(*choose_tensor_tile(ctx, g, batch))];
  return permuted_row_stride(ctx, g, t);
}

bool tensor_takes_extras(const LowerContext& ctx, const GemvExtras& x) {
  if (!ctx.device.tensor_sibling || !sibling_only(x, ctx.inputs[1].dtype)) return false;
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  if (!tensor_matmul_rejection(ctx, g, batch).empty()) return false;
  // Products large enough for the big tiles run faster on them one by one: the sibling's tiles
  // are for products that take the small ones anyway.
  const TensorTile& alone = kTiles[static_cast<size_t>(*choose_tensor_tile(ctx, g, batch))];
  if (int64_t{alone.bm} * alone.bn > kSiblingMaxAloneArea) return false;
  return choose_tensor_tile(ctx, g, batch, true).has_value();
}

Lowering lower_matmul_tensor(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                             const TensorTile& t, const MatmulEpilogue* e,
                             const GemvExtras* extras) {
  const DType in_a = ctx.inputs[0].dtype, in_b = ctx.inputs[1].dtype;
  if ((in_a != DType::f16 && in_a != DType::bf16) || in_b != in_a) {
    throw Error("matmul (tensor-addressed): operands must be both f16 or both bf16");
  }
  if (extras && (!sibling_only(*extras, in_b) || !tensor_tile_takes_sibling(t, ctx.device))) {
    throw Error(
        "matmul (tensor-addressed): takes a sibling product of B's dtype only, no norm "
        "or stacked products, in a tile that holds two accumulators");
  }
  const bool sibling = extras != nullptr;
  const bool permuted = ctx.stored_perm != nullptr;
  std::optional<int64_t> row_stride;
  if (permuted) {
    row_stride = permuted_row_stride(ctx, g, t);
    if (!row_stride || sibling) {
      throw Error("matmul (tensor-addressed): cannot store this product permuted with tile " +
                  std::string(t.name) + " (batch axes, rows and the last axis must stay whole)");
    }
  }
  const bool bf16 = in_a == DType::bf16;
  const std::string elem = bf16 ? "bfloat16_t" : "float16_t";
  const int64_t a_size = g.m * g.k, b_size = g.k * g.n;
  const int64_t row_tiles = (g.m + t.bm - 1) / t.bm, col_tiles = (g.n + t.bn - 1) / t.bn;
  const DType out = ctx.node.type.dtype;
  if (out != DType::f32 && out != in_a) {
    throw Error("matmul (tensor-addressed): the result must be f32 or the operands' dtype");
  }
  const std::string epilogue = e ? e->declarations + epilogue_function(e) : std::string();
  const int64_t tiles = row_tiles * col_tiles * batch;
  // A sibling doubles each tile's work and would double its partial sums: never split.
  const int splits = sibling ? 1 : split_count(g, t, tiles, ctx.device);
  const int64_t k_steps = (g.k + t.bk - 1) / t.bk;
  const int64_t split_k = (k_steps + splits - 1) / splits * t.bk;
  const int64_t partials = int64_t{splits} * batch * g.m * g.n;
  if (splits > 1 && partials > int64_t{std::numeric_limits<uint32_t>::max()} - 16) {
    throw Error("matmul (tensor-addressed): " + std::to_string(splits) +
                " K splits of this product need more partial sums than 32-bit offsets address");
  }
  const size_t extra = (e ? e->extra.size() : 0) + (sibling ? 1 : 0);
  // A 16-bit sibling product reads as its store would round it.
  const DType sibling_dtype = sibling ? extras->sibling_product_dtype : DType::f32;
  const bool sibling_rounds = is_half_float(sibling_dtype);
  const std::string narrow = sibling_dtype == DType::bf16 ? "bf16" : "f16";
  TemplateFields f{
      {"EXTENSIONS", bf16 ? "#extension GL_EXT_bfloat16 : require" : ""},
      {"TA", g.ta ? "1" : "0"},
      {"TB", g.tb ? "1" : "0"},
      {"EPILOGUE", e ? "1" : "0"},
      {"ROUND_BF16", out == DType::bf16 ? "1" : "0"},
      {"UNROLL", std::to_string(t.unroll)},
      {"C_TYPE", out == DType::f32 ? "float" : elem},
      {"M", std::to_string(g.m)},
      {"N", std::to_string(g.n)},
      {"K", std::to_string(g.k)},
      {"LDA", std::to_string(g.ta ? g.m : g.k)},
      {"LDB", std::to_string(g.tb ? g.k : g.n)},
      {"BM", std::to_string(t.bm)},
      {"BN", std::to_string(t.bn)},
      {"BK", std::to_string(t.bk)},
      {"ROW_TILES", std::to_string(row_tiles)},
      {"COL_TILES", std::to_string(col_tiles)},
      {"BATCHES", std::to_string(batch)},
      {"SPLITS", std::to_string(splits)},
      {"KS", std::to_string(split_k)},
      {"SPLIT_PARTS", splits > 1 ? split_parts_declarations(3 + extra) : std::string()},
      {"A_TYPE", elem},
      {"B_TYPE", elem},
      {"MAT_TYPE", elem},
      {"EPILOGUE_DECLARATIONS", epilogue},
      {"SIBLING", sibling ? "1" : "0"},
      {"S_BINDING", std::to_string(2 + extra)},
      {"SIBLING_CONVERSIONS", sibling_rounds ? glsl::half_conversions() : ""},
      {"SIBLING_VALUE",
       sibling_rounds ? "mn_" + narrow + "_to_f32(mn_f32_to_" + narrow + "(v))" : "v"},
      {"PERMUTED_STORE", permuted ? "1" : "0"},
      {"C_ROW_STRIDE", std::to_string(row_stride.value_or(0))},
      {"C_STORED", permuted
                       ? permuted_offset_function(*ctx.stored_shape, *ctx.stored_perm, "c_stored")
                       : std::string()},
      {"BATCH_SETUP", glsl::unravel(g.out_batch, "bz", "q")},
      {"A_BASE", glsl::broadcast_offset(g.a_batch, g.out_batch, "q") + " * " + ulit(a_size)},
      {"B_BASE", glsl::broadcast_offset(g.b_batch, g.out_batch, "q") + " * " + ulit(b_size)},
  };
  KernelLaunch k;
  k.name = std::string("matmul_tensor_") + t.name + (sibling ? "+sibling" : "") +
           (splits > 1 ? "_split" + std::to_string(splits) : std::string());
  if (permuted) k.name += "+store[" + permute_label(*ctx.stored_perm) + "]";
  k.glsl = fill_kernel_template("matmul_tensor.comp", f);
  k.workgroup = {t.invocations, 1, 1};
  k.groups = coop_wg_grid(tiles * splits, ctx.device, "matmul (tensor-addressed)");
  k.current_compiler = true;

  Lowering l;
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  if (e) {
    for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
  }
  if (sibling) k.bindings.push_back({ArgRef::input(extras->sibling_input), false});
  if (splits > 1) {
    k.bindings.push_back({ArgRef::scratch(0), true});
    k.bindings.push_back({ArgRef::counters(0), true});
    l.scratch_bytes.push_back(static_cast<uint64_t>(partials) * sizeof(float));
    l.counter_bytes.push_back(static_cast<uint64_t>(tiles) * sizeof(uint32_t));
  }
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace mn::codegen
