// Implicit GEMM on workgroup-scope tensor cores.
//
// Launches: for A and for B, the largest magnitude over the operand's values and the scaled
// f16 copy (codegen/lower_matmul_coop.h's pack_coop_source, here evaluating a_at / b_at over
// padded indices); the product (one workgroup per tile, group and K split); with split K, a
// sum of the partial tiles. The copies keep the operand's fast axis (a_k_fast, b_k_fast)
// contiguous, so the packing reads memory in order, and the product loads the other layout
// column-major.
#include "codegen/lower_conv_gemm_coop.h"

#include <algorithm>
#include <limits>
#include <string>

#include "codegen/glsl.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Each split keeps at least this much of K (in elements), so partial tiles stay few.
constexpr int64_t kMinSplitK = 512;
// Where the tensor cores pay (lower_implicit_gemm_coop).
constexpr int64_t kMinK = 512;
constexpr double kMaxPackPerMac = 9e-3;

}  // namespace

PackSource pack_source(const ImplicitGemm& spec, const std::string& fn, const std::string& body,
                       const Packed& p, const std::string& source, int64_t source_count) {
  PackSource src;
  src.declarations = spec.declarations + "float " + fn +
                     (fn == "a_at" ? "(uint g, uint m, uint k)" : "(uint g, uint k, uint n)") +
                     " {\n" + body + "}\n";
  src.bindings = static_cast<uint32_t>(spec.bindings.size());
  // Storage order: K contiguous when k_fast. For A (rows M, cols K) that is row-major; for B
  // (rows K, cols N) column-major.
  const bool row_major = p.k_fast == p.k_is_cols;
  const int64_t outer_p = row_major ? p.rows_p : p.cols_p,
                inner_p = row_major ? p.cols_p : p.rows_p;
  const int64_t outer = row_major ? p.rows : p.cols, inner = row_major ? p.cols : p.rows;
  const std::string call = fn + (row_major ? "(g, o, n_)" : "(g, n_, o)");
  src.count = static_cast<uint64_t>(spec.groups * outer_p * inner_p);
  src.value = "  uint g = i / " + ulit(outer_p * inner_p) + ", r = i % " + ulit(outer_p * inner_p) +
              ", o = r / " + ulit(inner_p) + ", n_ = r % " + ulit(inner_p) + ";\n  v = o < " +
              ulit(outer) + " && n_ < " + ulit(inner) + " ? " + call + " : 0.0;\n";
  if (!source.empty()) {
    // Every packed value is one of the source's (or zero): its largest magnitude bounds them.
    src.source_count = static_cast<uint64_t>(source_count);
    src.source_value = "    v = " + source + "_ld(j);\n";
    return src;
  }
  src.source_count = static_cast<uint64_t>(spec.groups * outer * inner);
  src.source_value = "    uint g = j / " + ulit(outer * inner) + ", r = j % " +
                     ulit(outer * inner) + ", o = r / " + ulit(inner) + ", n_ = r % " +
                     ulit(inner) + ";\n    v = " + call + ";\n";
  return src;
}

std::optional<Lowering> lower_implicit_gemm_coop(const ImplicitGemm& spec, const DeviceTraits& d) {
  if (!d.coop) return std::nullopt;
  if (!d.conv_coop) return std::nullopt;
  if (spec.m * spec.n * spec.k * spec.groups < kCoopMinMacs) return std::nullopt;
  // The packing moves M·K + K·N elements for M·N·K multiply-adds, and every result makes a
  // round trip through the f32 tile scratch. Measured on an H200 (docs/perf.md, ResNet-50 at
  // batch 32, 48 GEMMs against the f32 implicit GEMM): the tensor cores won where
  // 1/M + 1/N < 9e-3 and K >= 512, and lost up to 2.9x elsewhere (64-channel layers over
  // 100k pixels, short-K 1x1 layers). Since the pack converts 16 elements a thread (2026-12-06,
  // H100), long-K weight gradients of narrow layers win too: their specs raise the bound.
  const double max_pack_per_mac =
      spec.coop_max_pack_per_mac > 0 ? spec.coop_max_pack_per_mac : kMaxPackPerMac;
  if (spec.k < kMinK ||
      1.0 / static_cast<double>(spec.m) + 1.0 / static_cast<double>(spec.n) >= max_pack_per_mac) {
    return std::nullopt;
  }
  // Bindings: the spec's, then the product's two packed operands and the tile scratch.
  const auto nb = static_cast<uint32_t>(spec.bindings.size());
  if (nb + 3 > d.max_storage_buffers) return std::nullopt;
  // The tile and orientation with the least padded work (ties: the larger tile, then the
  // first orientation found). Transposed, the product computes Cᵀ = Bᵀ·Aᵀ, which puts a
  // narrow N on the tile's 128-row side.
  const CoopWgTile* tile = nullptr;
  bool transposed = false;
  int64_t best_work = 0;
  const auto tiles_all = coop_wg_tiles();
  for (size_t i = 0; i < tiles_all.size(); ++i) {
    if (!coop_wg_tile_usable(i, d)) continue;
    const CoopWgTile& t = tiles_all[i];
    for (bool tr : {false, true}) {
      const int64_t rows = tr ? spec.n : spec.m, cols = tr ? spec.m : spec.n;
      const int64_t work = round_up(rows, t.bm) * round_up(cols, t.bn);
      if (!tile || work < best_work || (work == best_work && t.bm * t.bn > tile->bm * tile->bn)) {
        tile = &t;
        transposed = tr;
        best_work = work;
      }
    }
  }
  if (!tile) return std::nullopt;
  const CoopWgTile& t = *tile;
  // Padding: M to the tile's rows (columns when transposed), N the other way, K to bk.
  const int64_t mp = round_up(spec.m, transposed ? t.bn : t.bm);
  const int64_t np = round_up(spec.n, transposed ? t.bm : t.bn);
  const int64_t kp = round_up(spec.k, t.bk);
  const int64_t row_tiles = (transposed ? np : mp) / t.bm,
                col_tiles = (transposed ? mp : np) / t.bn;
  const int64_t want = d.groups_to_fill();
  const int64_t base = row_tiles * col_tiles * spec.groups;
  int64_t splits = 1;
  if (base < want) {
    splits =
        std::clamp<int64_t>((2 * want + base - 1) / base, 1, std::max<int64_t>(1, kp / kMinSplitK));
  }
  const int64_t k_split = round_up((kp + splits - 1) / splits, t.bk);
  splits = (kp + k_split - 1) / k_split;
  // The kernels index the packed copies and the tile scratch with 32-bit integers.
  const int64_t u32_max = std::numeric_limits<uint32_t>::max() - 16;
  if (spec.groups * mp * kp > u32_max || spec.groups * np * kp > u32_max ||
      row_tiles * col_tiles * spec.groups * splits * t.bm * t.bn > u32_max) {
    return std::nullopt;
  }

  Lowering l;
  int scratch = 0;
  const Packed pa{spec.m, spec.k, mp, kp, spec.a_k_fast, true};
  const Packed pb{spec.k, spec.n, kp, np, spec.b_k_fast, false};
  const std::string name = spec.name + "_coop";
  const ArgRef a =
      pack_coop_source(pack_source(spec, "a_at", spec.a_at, pa, spec.a_source, spec.a_source_count),
                       spec.bindings, name, d, l, scratch);
  const ArgRef b =
      pack_coop_source(pack_source(spec, "b_at", spec.b_at, pb, spec.b_source, spec.b_source_count),
                       spec.bindings, name, d, l, scratch);
  const int64_t a_size = mp * kp, b_size = kp * np;

  // The product's operands. A is packed M×K (K×M unless a_k_fast), B K×N (N×K when
  // b_k_fast); transposed, Bᵀ is the product's first operand and Aᵀ its second.
  CoopWgProduct p;
  p.tile = &t;
  p.batches = spec.groups * splits;
  p.row_tiles = row_tiles;
  p.col_tiles = col_tiles;
  p.m = transposed ? spec.n : spec.m;
  p.n = transposed ? spec.m : spec.n;
  if (!transposed) {
    p.ta = !spec.a_k_fast;
    p.lda = spec.a_k_fast ? kp : mp;
    p.tb = spec.b_k_fast;
    p.ldb = spec.b_k_fast ? kp : np;
  } else {
    p.ta = !spec.b_k_fast;
    p.lda = spec.b_k_fast ? kp : np;
    p.tb = spec.a_k_fast;
    p.ldb = spec.a_k_fast ? kp : mp;
  }
  const int64_t first_size = transposed ? b_size : a_size,
                second_size = transposed ? a_size : b_size;
  p.setup = "  uint g = bz / " + ulit(splits) + ", s = bz % " + ulit(splits) + ";\n";
  p.a_base = "g * " + ulit(first_size);
  p.b_base = "g * " + ulit(second_size);
  p.k_begin = "s * " + ulit(k_split);
  p.k_end = "min(s * " + ulit(k_split) + " + " + ulit(k_split) + ", " + ulit(kp) + ")";
  p.scale = "exp2(-float(" + coop_wg_exponent("HA", spec.groups * first_size) + " + " +
            coop_wg_exponent("HB", spec.groups * second_size) + "))";
  const std::string store_fn =
      "void c_store(uint g, uint m, uint n, float v) {\n" + spec.c_store + "}\n";
  if (splits == 1)
    p.store = transposed ? "      c_store(g, gn, gm, v);\n" : "      c_store(g, gm, gn, v);\n";
  KernelLaunch k;
  k.name = name + "_" + t.name + (transposed ? "t" : "");
  k.glsl = coop_wg_header() + spec.declarations + coop_wg_operand_buffers(nb, nb + 2, true) +
           store_fn + coop_wg_product(p);
  k.workgroup = {t.invocations, 1, 1};
  k.groups = coop_wg_grid(row_tiles * col_tiles * p.batches, d, spec.name.c_str());
  k.coop_khr = true;
  k.bindings = spec.bindings;
  k.bindings.push_back({transposed ? b : a, false});
  k.bindings.push_back({transposed ? a : b, false});
  const ArgRef w = ArgRef::scratch(scratch++);
  k.bindings.push_back({w, true});
  l.scratch_bytes.push_back(static_cast<uint64_t>(row_tiles * col_tiles * p.batches) * t.bm * t.bn *
                            4);
  l.launches.push_back(std::move(k));
  if (splits == 1) return l;

  // The partial tiles of every split, summed in split order, stored through c_store. Threads
  // walk C's fast axis.
  const int64_t mn = spec.m * spec.n;
  std::string body = "  uint g = i / " + ulit(mn) + ", r = i % " + ulit(mn) + ";\n";
  body += spec.c_n_fast ? "  uint m = r / " + ulit(spec.n) + ", n = r % " + ulit(spec.n) + ";\n"
                        : "  uint n = r / " + ulit(spec.m) + ", m = r % " + ulit(spec.m) + ";\n";
  // The product's row and column of (m, n).
  const std::string pr = transposed ? "n" : "m", pc = transposed ? "m" : "n";
  body += "  uint slot = (" + pr + " / " + ulit(t.bm) + ") * " + ulit(col_tiles) + " + " + pc +
          " / " + ulit(t.bn) + ", at = (" + pr + " % " + ulit(t.bm) + ") * " + ulit(t.bn) + " + " +
          pc + " % " + ulit(t.bn) + ";\n";
  body += "  float acc = 0.0;\n";
  body += "  for (uint s = 0u; s < " + ulit(splits) + "; ++s) acc += WS[((g * " + ulit(splits) +
          " + s) * " + ulit(row_tiles * col_tiles) + " + slot) * " + ulit(t.bm * t.bn) +
          " + at];\n";
  body += "  c_store(g, m, n, acc);\n";
  std::vector<KernelBinding> sum_bindings = spec.bindings;
  sum_bindings.push_back({w, false});
  const std::string decl = spec.declarations +
                           "layout(std430, set = 0, binding = " + std::to_string(nb) +
                           ") readonly buffer BufferWS { float WS[]; };\n" + store_fn;
  l.launches.push_back(glsl::elementwise_launch(name + "_split_sum", decl, body,
                                                static_cast<uint64_t>(spec.groups * mn), d,
                                                std::move(sum_bindings)));
  return l;
}

}  // namespace mn::codegen
