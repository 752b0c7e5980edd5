// Batched matmul with broadcast batch dims and transposed operands, in f32 arithmetic whatever
// the storage type.
//
// Tiled kernel: 256 threads (16×16) compute a 16T×16T output tile, each a T×T block (T = 4
// once both M and N fill 64, else 1). K advances a slab at a time (32 wide with T = 4, else 16):
// both operands' slabs are staged in shared memory, and every thread loads its share of the
// next slab into registers before the products of the current one, so a slab's load latency
// hides behind the previous slab's arithmetic (without this, a 512 × 576 × 576 product on an
// H200 spent most of its time waiting on loads: 72 workgroups cannot hide them by number).
// The thread-to-element map of the loads follows each operand's memory order, so every
// transpose combination reads whole contiguous runs.
//
// Matrix-vector products (M = 1 or N = 1) have kernels of their own (lower_gemv.cpp).
#include <algorithm>
#include <bit>
#include <limits>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "codegen/lower_matmul.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/lower_matmul_tensor.h"
#include "codegen/matmul_epilogue.h"
#include "codegen/store_rewrites.h"
#include "ir/ops/matmul.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

}  // namespace

std::string batch_bases(const MatmulGeometry& g) {
  std::string s = glsl::unravel(g.out_batch, "bz", "q");
  s += "  uint abase = " + glsl::broadcast_offset(g.a_batch, g.out_batch, "q") + " * " +
       ulit(g.m * g.k) + ";\n";
  s += "  uint bbase = " + glsl::broadcast_offset(g.b_batch, g.out_batch, "q") + " * " +
       ulit(g.k * g.n) + ";\n";
  return s;
}

namespace {

std::string operand_buffers(const LowerContext& ctx) {
  return glsl::buffer(0, ctx.inputs[0].dtype, "A", true) +
         glsl::buffer(1, ctx.inputs[1].dtype, "B", true) +
         glsl::buffer(2, ctx.node.type.dtype, "C", false);
}

void check_elements(const MatmulGeometry& g, int64_t batch) {
  const auto limit = static_cast<int64_t>(std::numeric_limits<uint32_t>::max());
  for (int64_t elements : {batch * g.m * g.k, batch * g.k * g.n, batch * g.m * g.n}) {
    if (elements > limit) {
      throw Error("matmul: an operand of " + std::to_string(elements) +
                  " elements exceeds 32-bit indexing");
    }
  }
}

// The tiled kernel's sizes, fixed by the shape: T×T outputs per thread, TILE = 16·T, K staged
// KS at a time, each thread carrying `per_thread` elements of each operand's slab.
struct TiledConfig {
  int64_t t = 1, tile = 16, ks = 16, per_thread = 1;
  bool check_m = false, check_n = false, check_k = false;  // shapes not of whole tiles/slabs

  explicit TiledConfig(const MatmulGeometry& g) {
    // 64×64 tiles with 4×4 per thread once the columns fill them and the rows half of one
    // (a 50-row product runs 4× the multiply-adds per load that 16×16 tiles give); 16×16 tiles
    // otherwise.
    t = (g.m >= 32 && g.n >= 64) ? 4 : 1;
    tile = 16 * t;
    ks = t == 4 ? 32 : 16;
    per_thread = ks * tile / 256;
    check_m = g.m % tile != 0;
    check_n = g.n % tile != 0;
    check_k = g.k % ks != 0;
  }
};

std::string guard(std::initializer_list<std::pair<bool, std::string>> conds) {
  std::string s;
  for (const auto& [need, c] : conds) {
    if (need) s += (s.empty() ? "" : " && ") + c;
  }
  return s;
}

// Element e of a thread's share of a slab: its (k, m) in A's slab and (k, n) in B's. The map
// follows each operand's memory order (the contiguous axis fastest across threads), so every
// transpose combination reads whole contiguous runs.
std::string slab_coords(const MatmulGeometry& g, const TiledConfig& c, int64_t e) {
  const std::string TILE = ulit(c.tile), KS = ulit(c.ks);
  std::string s = "      uint idx = lid + " + ulit(e * 256) + ";\n";
  s += g.ta ? "      uint mm = idx % " + TILE + ", kk = idx / " + TILE + ";\n"   // A [K, M]
            : "      uint kk = idx % " + KS + ", mm = idx / " + KS + ";\n";      // A [M, K]
  s += g.tb ? "      uint kb = idx % " + KS + ", nn = idx / " + KS + ";\n"       // B [N, K]
            : "      uint nn = idx % " + TILE + ", kb = idx / " + TILE + ";\n";  // B [K, N]
  return s;
}

// Loads the slab at K offset `kn` into the registers ra, rb (issued before the previous slab's
// products, so their latency hides behind them). `gamma`: B's (and the sibling's) elements
// scaled by G[k] as they load (a norm's gain; A stays as it is, its staged values giving the
// rows' squares, and the rows' scale multiplies the stored sums).
std::string slab_loads(const MatmulGeometry& g, const TiledConfig& c, bool gamma = false,
                       bool sibling = false) {
  const std::string M = ulit(g.m), N = ulit(g.n), K = ulit(g.k);
  // Past the edges: loaded at the clamped element, then selected away, so that a thread's
  // loads are issued together (a load inside a branch may wait out its latency first).
  auto clamp = [](bool check, const std::string& v, const std::string& extent) {
    return check ? "min(" + v + ", " + extent + " - 1u)" : v;
  };
  const std::string am = clamp(c.check_m, "gm", M), ak = clamp(c.check_k, "gk", K);
  const std::string a_off = g.ta ? ak + " * " + M + " + " + am : am + " * " + K + " + " + ak;
  const std::string a_guard = guard({{c.check_m, "gm < " + M}, {c.check_k, "gk < " + K}});
  const std::string a_load =
      a_guard.empty() ? "A_ld(abase + " + a_off + ")" : "(" + a_guard + ") ? ld_a : 0.0";
  const std::string bn = clamp(c.check_n, "gn", N), bk = clamp(c.check_k, "gkb", K);
  const std::string b_off = g.tb ? bn + " * " + K + " + " + bk : bk + " * " + N + " + " + bn;
  const std::string b_guard = guard({{c.check_n, "gn < " + N}, {c.check_k, "gkb < " + K}});
  // B's element, or the sibling's (S: B's shape and layout), held in `held` where guarded.
  auto b_like = [&](const std::string& matrix, const std::string& held) {
    const std::string v = b_guard.empty() ? matrix + "_ld(bbase + " + b_off + ")"
                                          : "(" + b_guard + ") ? " + held + " : 0.0";
    return gamma ? "(" + v + ") * G_ld(" + bk + ")" : v;
  };
  // Unrolled here: registers indexed by a literal stay registers.
  std::string s;
  for (int64_t e = 0; e < c.per_thread; ++e) {
    const std::string E = std::to_string(e);
    s += "    {\n" + slab_coords(g, c, e);
    s += "      uint gm = row0 + mm, gk = kn + kk, gn = col0 + nn, gkb = kn + kb;\n";
    if (!a_guard.empty()) s += "      float ld_a = A_ld(abase + " + a_off + ");\n";
    if (!b_guard.empty()) s += "      float ld_b = B_ld(bbase + " + b_off + ");\n";
    if (!b_guard.empty() && sibling) s += "      float ld_s = S_ld(bbase + " + b_off + ");\n";
    s += "      ra[" + E + "] = " + a_load + ";\n      rb[" + E + "] = " + b_like("B", "ld_b") +
         ";\n";
    if (sibling) s += "      rs[" + E + "] = " + b_like("S", "ld_s") + ";\n";
    s += "    }\n";
  }
  return s;
}

// Stores the registers into the shared slabs.
std::string slab_stores(const MatmulGeometry& g, const TiledConfig& c, bool sibling = false) {
  std::string s;
  for (int64_t e = 0; e < c.per_thread; ++e) {
    const std::string E = std::to_string(e);
    s += "    {\n" + slab_coords(g, c, e);
    s += c.t == 4 ? "      As4[kk][mm >> 2][mm & 3u] = ra[" + E + "];\n      Bs4[kb][nn >> 2][nn & 3u] = rb[" + E + "];\n"
                  : "      As[kk][mm] = ra[" + E + "];\n      Bs[kb][nn] = rb[" + E + "];\n";
    if (sibling) {
      s += c.t == 4 ? "      Ss4[kb][nn >> 2][nn & 3u] = rs[" + E + "];\n"
                    : "      Ss[kb][nn] = rs[" + E + "];\n";
    }
    s += "    }\n";
  }
  return s;
}

// The products of one staged slab. With T = 4 a thread owns 4 consecutive rows and columns and
// reads each slab row as one vec4 per operand (3 shared wavefronts per 16 FMAs instead of 8);
// with T = 1 thread (tx, ty) owns row ty and column tx.
std::string slab_products(const TiledConfig& c, bool sibling = false, bool norm = false) {
  std::string s = "    for (uint kk = 0u; kk < " + ulit(c.ks) + "; ++kk) {\n";
  if (c.t == 4) {
    s += "      vec4 a = As4[kk][ty], b = Bs4[kk][tx];\n";
    s += "      acc[0] += a.x * b; acc[1] += a.y * b; acc[2] += a.z * b; acc[3] += a.w * b;\n";
    if (norm) s += "      ssq += a * a;\n";
    if (sibling) {
      s += "      vec4 sb = Ss4[kk][tx];\n";
      s +=
          "      sib[0] += a.x * sb; sib[1] += a.y * sb; sib[2] += a.z * sb; sib[3] += a.w * sb;\n";
    }
  } else {
    s += "      acc[0][0] += As[kk][ty] * Bs[kk][tx];\n";
    if (sibling) s += "      sib[0][0] += As[kk][ty] * Ss[kk][tx];\n";
    if (norm) s += "      ssq.x += As[kk][ty] * As[kk][ty];\n";
  }
  s += "    }\n";
  return s;
}

// K splits of the tiled kernel: each workgroup of a tile adds a K range of at least one slab,
// the last to finish adds the others' partial sums. DeviceTraits::matmul_split_k
// (MN_MATMUL_SPLIT_K) forces a count; 0 chooses:
// - a product whose tiles fill less than two waves of the device over a long K (at least
//   kSplitMinK: the weight gradients of a training step, whose K is batch × tokens) splits into
//   ranges of at least 8 slabs until its grid holds about four workgroups per multiprocessor;
// - a product of fewer than 64 rows whose tiles fill less than a quarter of a wave (SmolVLA's
//   50 action tokens) splits a K of at least 8 slabs into ranges of at least 4 until the grid
//   holds about one workgroup per multiprocessor.
// Other products stay whole: a 512-token prefill's q, k and v products (K 576, 72 and 24
// tiles) share their barrier window, and split they measured 9.3 ms against 8.7, though alone
// they ran faster (512 × 576 × 192: 27.7 → 17.4 µs); its down projection (K 1536) split made the
// prefill 9.05 ms against 8.81 (docs/perf.md).
constexpr int64_t kSplitMinK = 2048;

struct KSplit {
  int64_t count = 1, k = 0;  // splits, and the K range of each (whole slabs)
};

KSplit tiled_splits(const TiledConfig& c, const MatmulGeometry& g, int64_t tiles,
                    const DeviceTraits& d) {
  const int64_t slabs = (g.k + c.ks - 1) / c.ks;
  int64_t want = d.matmul_split_k;
  if (want == 0) {
    const int64_t fill = d.groups_to_fill();
    if (g.k >= kSplitMinK && tiles < 2 * fill) {
      want = std::min((4 * fill + tiles - 1) / tiles, slabs / 8);
    } else if (g.m < 64 && 4 * tiles < fill && slabs >= 8) {
      want = std::min((fill + tiles - 1) / tiles, slabs / 4);
    } else {
      want = 1;
    }
  }
  const int64_t s = std::clamp<int64_t>(want, 1, std::max<int64_t>(slabs, 1));
  const int64_t per = (slabs + s - 1) / s;       // slabs per split
  return {(slabs + per - 1) / per, per * c.ks};  // so that no split is empty
}

// GLSL: statements `body` for every output (i, j) of the thread, gm and gn its row and column,
// inside the bounds.
std::string per_output(const TiledConfig& c, const MatmulGeometry& g, const std::string& body) {
  const std::string guard_expr =
      guard({{c.check_m, "gm < " + ulit(g.m)}, {c.check_n, "gn < " + ulit(g.n)}});
  std::string s;
  for (int64_t i = 0; i < c.t; ++i) {
    for (int64_t j = 0; j < c.t; ++j) {
      const std::string I = std::to_string(i), J = std::to_string(j);
      std::string b = glsl::replace_all(body, "@acc", "acc[" + I + "][" + J + "]");
      b = glsl::replace_all(b, "@sib", "sib[" + I + "][" + J + "]");
      b = glsl::replace_all(b, "@rs", "rscale[" + I + "]");
      s += "  {\n";
      s += c.t == 4 ? "    uint gm = row0 + ty * 4u + " + I + "u, gn = col0 + tx * 4u + " + J + "u;\n"
                    : "    uint gm = row0 + ty, gn = col0 + tx;\n";
      s += "    " + (guard_expr.empty() ? "" : "if (" + guard_expr + ") ") + b + "\n  }\n";
    }
  }
  return s;
}

// With K split: this workgroup's partial sums into P; the last of a tile's workgroups to
// finish goes on with the sum of every split's partials, added in split order whichever
// finished last, so that a step gives the same bits every run (exact resume), and leaves the
// tile's counter zero for the next run; the others return.
std::string combine_splits(const TiledConfig& c, const MatmulGeometry& g, int64_t batch,
                           int64_t splits, bool sibling = false, bool norm = false) {
  const std::string MN = ulit(g.m * g.n), N = ulit(g.n), M = ulit(g.m), B = ulit(batch);
  // A sibling's partials follow the product's, and the rows' partial squares follow both.
  const std::string SIB = ulit(splits * batch * g.m * g.n);
  const std::string SSQ = ulit(splits * batch * g.m * g.n * (sibling ? 2 : 1));
  std::string s =
      per_output(c, g, "P_st((split * " + B + " + bz) * " + MN + " + gm * " + N + " + gn, @acc);");
  if (sibling) {
    s += per_output(
        c, g,
        "P_st(" + SIB + " + (split * " + B + " + bz) * " + MN + " + gm * " + N + " + gn, @sib);");
  }
  if (norm) {
    // Each row's squares, stored by the thread of the tile's first column holding it.
    s += "  if (tx == 0u) {\n";
    for (int64_t i = 0; i < c.t; ++i) {
      const std::string I = std::to_string(i);
      s += "    { uint gm = row0 + ty * " + ulit(c.t) + " + " + I + "u;\n      if (gm < " + M +
           ") P_st(" + SSQ + " + (split * " + B + " + bz) * " + M + " + gm, ssq[" + I + "]); }\n";
    }
    s += "  }\n";
  }
  s += "  memoryBarrierBuffer();\n  barrier();\n";
  s += "  if (lid == 0u) {\n    last_sh = atomicAdd(done[tile_id], 1u) == " + ulit(splits - 1) +
       ";\n    if (last_sh) done[tile_id] = 0u;\n  }\n";
  s += "  barrier();\n  if (!last_sh) return;\n  memoryBarrierBuffer();\n";
  s += per_output(c, g,
                  "{ float own = @acc; @acc = 0.0; for (uint sp = 0u; sp < " + ulit(splits) +
                      "; ++sp) @acc += sp == split ? own : P_ld((sp * " + B + " + bz) * " + MN +
                      " + gm * " + N + " + gn); }");
  if (sibling) {
    s += per_output(c, g,
                    "{ float own = @sib; @sib = 0.0; for (uint sp = 0u; sp < " + ulit(splits) +
                        "; ++sp) @sib += sp == split ? own : P_ld(" + SIB + " + (sp * " + B +
                        " + bz) * " + MN + " + gm * " + N + " + gn); }");
  }
  if (norm) {
    // Every thread of a row adds the row's partial squares, in split order.
    for (int64_t i = 0; i < c.t; ++i) {
      const std::string I = std::to_string(i);
      s += "  { uint gm = min(row0 + ty * " + ulit(c.t) + " + " + I + "u, " + M + " - 1u);\n";
      s += "    float own = ssq[" + I + "]; ssq[" + I + "] = 0.0;\n";
      s += "    for (uint sp = 0u; sp < " + ulit(splits) + "; ++sp) ssq[" + I +
           "] += sp == split ? own : P_ld(" + SSQ + " + (sp * " + B + " + bz) * " + M +
           " + gm); }\n";
    }
  }
  return s;
}

Lowering lower_tiled(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                     const MatmulEpilogue* e, const GemvExtras* x = nullptr) {
  if (x && !tiled_takes_extras(ctx, *x)) {
    throw Error(
        "matmul (tiled): takes a norm of A's rows over K (A not transposed) and a sibling "
        "product of B's shape, nothing else");
  }
  const bool norm = x && x->norm, gamma = norm && x->gamma_input >= 0;
  const bool sibling = x && x->sibling_input >= 0;
  const TiledConfig c(g);
  const std::string K = ulit(g.k), TILE = ulit(c.tile);
  const std::string KS = ulit(c.ks), PT = ulit(c.per_thread);

  if (ctx.device.max_workgroup_invocations < 256) {
    throw Error("matmul: the tiled kernel needs workgroups of 256 invocations; the device allows " +
                std::to_string(ctx.device.max_workgroup_invocations));
  }
  // Row tiles, batch and K splits share the y dimension of the grid, folded into z past its
  // limit.
  const int64_t col_tiles = (g.n + c.tile - 1) / c.tile, row_tiles = (g.m + c.tile - 1) / c.tile;
  const int64_t tiles = col_tiles * row_tiles * batch;
  const KSplit split = tiled_splits(c, g, tiles, ctx.device);
  const int64_t splits = split.count;
  if (splits > 1 && splits * batch * g.m * g.n > int64_t{std::numeric_limits<uint32_t>::max()}) {
    throw Error("matmul: " + std::to_string(splits) +
                " K splits of this product need more partial sums than 32-bit offsets address");
  }
  const int64_t rows_total = row_tiles * batch * splits;
  const int64_t limit = ctx.device.max_group_count;
  if (col_tiles > limit) {
    throw Error("matmul: N = " + std::to_string(g.n) + " needs " + std::to_string(col_tiles) +
                " column tiles, more than the device's " + std::to_string(limit) + " groups");
  }
  const int64_t gy = std::min(rows_total, limit), gz = (rows_total + gy - 1) / gy;
  if (gz > limit) {
    throw Error("matmul: " + std::to_string(rows_total) +
                " row tiles × batches × K splits exceed the device's grid limits");
  }

  std::string s = glsl::header() + operand_buffers(ctx);
  if (e) s += e->declarations;
  // Bound after the epilogue's operands: gamma, the sibling's matrix, then the split's partial
  // sums and counters.
  const size_t own_extra = e ? e->extra.size() : 0;
  const size_t extra = own_extra + (gamma ? 1 : 0) + (sibling ? 1 : 0);
  if (gamma) s += glsl::buffer(static_cast<uint32_t>(3 + own_extra), x->gamma_dtype, "G", true);
  if (sibling) {
    s += glsl::buffer(static_cast<uint32_t>(3 + own_extra + (gamma ? 1 : 0)), x->sibling_dtype, "S",
                      true);
    s += "float mm_sibling;\n";
  }
  if (splits > 1) {
    // Coherent: the last workgroup of a tile reads what the others stored.
    std::string part = glsl::buffer(static_cast<uint32_t>(3 + extra), DType::f32, "P", false);
    part.insert(part.find("buffer Buffer"), "coherent ");
    s += part;
    s += "layout(std430, set = 0, binding = " + std::to_string(4 + extra) +
         ") buffer Counters { uint done[]; };\nshared bool last_sh;\n";
  }
  s += epilogue_function(e);
  // One vec4 of pad per slab row keeps the staging stores mostly conflict-free.
  s += c.t == 4 ? "shared vec4 As4[" + KS + "][17];\nshared vec4 Bs4[" + KS + "][17];\n"
                : "shared float As[16][17];\nshared float Bs[16][17];\n";
  if (sibling) s += c.t == 4 ? "shared vec4 Ss4[" + KS + "][17];\n" : "shared float Ss[16][17];\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x, tx = lid % 16u, ty = lid / 16u;\n";
  s += "  uint yz = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;\n";
  if (gy * gz != rows_total) s += "  if (yz >= " + ulit(rows_total) + ") return;\n";
  s += "  uint split = yz / " + ulit(row_tiles * batch) + ", rt = yz % " + ulit(row_tiles * batch) +
       ";\n";
  s += "  uint bz = rt / " + ulit(row_tiles) + ", tile_id = rt * " + ulit(col_tiles) +
       " + gl_WorkGroupID.x;\n";
  s += "  uint row0 = (rt % " + ulit(row_tiles) + ") * " + TILE + ", col0 = gl_WorkGroupID.x * " +
       TILE + ";\n";
  s += "  uint kbegin = split * " + ulit(split.k) + ", kend = min(" + K + ", kbegin + " +
       ulit(split.k) + ");\n";
  s += batch_bases(g);
  s += c.t == 4 ? "  vec4 acc[4];\n  for (uint i = 0u; i < 4u; ++i) acc[i] = vec4(0.0);\n"
                : "  float acc[1][1];\n  acc[0][0] = 0.0;\n";
  if (sibling) {
    s += c.t == 4 ? "  vec4 sib[4];\n  for (uint i = 0u; i < 4u; ++i) sib[i] = vec4(0.0);\n"
                  : "  float sib[1][1];\n  sib[0][0] = 0.0;\n";
  }
  // The next slab is in flight while this one's products run: one slab of registers, two
  // barriers a slab (staged, then consumed).
  // Under a norm, the squares of the thread's rows of A, summed as the products read them.
  if (norm) s += "  vec4 ssq = vec4(0.0);\n";
  s += "  float ra[" + PT + "], rb[" + PT + "]" + (sibling ? ", rs[" + PT + "]" : "") +
       ";\n  uint kn = kbegin;\n";
  s += slab_loads(g, c, gamma, sibling);
  s += "  for (uint k0 = kbegin; k0 < kend; k0 += " + KS + ") {\n";
  s += slab_stores(g, c, sibling);
  s += "    barrier();\n    kn = k0 + " + KS + ";\n    if (kn < kend) {\n";
  s += slab_loads(g, c, gamma, sibling);
  s += "    }\n";
  s += slab_products(c, sibling, norm);
  s += "    barrier();\n  }\n";
  if (splits > 1) s += combine_splits(c, g, batch, splits, sibling, norm);
  s += "  uint cbase = bz * " + ulit(g.m * g.n) + ";\n";
  // Under a norm, each row's scale multiplies the sums of its (gamma-scaled) products.
  if (norm) {
    s += "  float rscale[4];\n";
    for (int64_t i = 0; i < c.t; ++i) {
      const std::string I = std::to_string(i);
      s += "  rscale[" + I + "] = inversesqrt(ssq[" + I + "] / " +
           glsl::float_literal(static_cast<double>(g.k)) + " + " + glsl::float_literal(x->eps) +
           ");\n";
    }
  }
  const std::string scale = norm ? " * @rs" : "";
  const std::string store =
      "C_st(cbase + gm * " + ulit(g.n) + " + gn, mm_epilogue(@acc" + scale + ", bz, gm, gn));";
  s += per_output(c, g, sibling ? "{ mm_sibling = @sib" + scale + "; " + store + " }" : store);
  s += "}\n";

  KernelLaunch k;
  k.name = "matmul_" + std::to_string(c.tile) + "x" + std::to_string(c.tile) +
           (splits > 1 ? "_split" + std::to_string(splits) : std::string()) +
           (norm ? "+prologue[rms_norm]" : "") + (sibling ? "+sibling" : "");
  k.glsl = std::move(s);
  k.workgroup = {256, 1, 1};
  k.groups = {static_cast<uint32_t>(col_tiles), static_cast<uint32_t>(gy),
              static_cast<uint32_t>(gz)};
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  if (e) {
    for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
  }
  if (gamma) k.bindings.push_back({ArgRef::input(x->gamma_input), false});
  if (sibling) k.bindings.push_back({ArgRef::input(x->sibling_input), false});
  Lowering l;
  if (splits > 1) {
    k.bindings.push_back({ArgRef::scratch(0), true});
    k.bindings.push_back({ArgRef::counters(0), true});
    l.scratch_bytes.push_back(
        static_cast<uint64_t>(splits * batch * g.m * (g.n * (sibling ? 2 : 1) + (norm ? 1 : 0))) *
        sizeof(float));
    l.counter_bytes.push_back(static_cast<uint64_t>(tiles) * sizeof(uint32_t));
  }
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace

Lowering lower_matmul_fused(const LowerContext& ctx, const MatmulEpilogue* e,
                            const GemvExtras* extras) {
  glsl::require_storage(ctx);
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  check_elements(g, batch);
  if (ctx.stored_perm &&
      ((extras && !tiled_takes_extras(ctx, *extras)) || !matmul_stores_permuted(ctx))) {
    throw Error("matmul: this product's kernel cannot store it permuted");
  }
  if (extras && !gemv_takes_extras(ctx) && !tensor_takes_extras(ctx, *extras) &&
      !tiled_takes_extras(ctx, *extras)) {
    throw Error("matmul: this product's kernel cannot take a norm or a sibling product");
  }
  const bool tensor = tensor_matmul_rejection(ctx, g, batch).empty();
  if (ctx.stored_perm && !tensor) {
    // Stored as it is, then every C_st of the kernels rewritten to the permuted offset.
    LowerContext plain = ctx;
    plain.stored_shape = nullptr;
    plain.stored_perm = nullptr;
    Lowering l = lower_matmul_fused(plain, e, extras);
    add_permuted_store(l, *ctx.stored_shape, *ctx.stored_perm, {0, "C"});
    return l;
  }
  if (g.m == 1 || g.n == 1) return lower_gemv(ctx, g, batch, e, extras);
  if (tensor) {
    const bool sibling = extras && extras->sibling_input >= 0;
    const TensorTile& t =
        tensor_tiles()[static_cast<size_t>(*choose_tensor_tile(ctx, g, batch, sibling))];
    return lower_matmul_tensor(ctx, g, batch, t, e, extras);
  }
  if (coop_rejection(ctx, g, batch).empty()) {
    if (coop_wg_rejection(ctx, g, batch).empty()) {
      const CoopWgTile& t =
          coop_wg_tiles()[static_cast<size_t>(*choose_coop_wg_tile(ctx, g, batch))];
      return lower_matmul_coop_wg(ctx, g, batch, t, e);
    }
    const CoopTile& t = coop_tiles()[static_cast<size_t>(*choose_coop_tile(g, batch, ctx.device))];
    return lower_matmul_coop(ctx, g, batch, t, coop_options_for(t, g, ctx.device), e);
  }
  return lower_tiled(ctx, g, batch, e, extras);
}

bool tiled_takes_extras(const LowerContext& ctx, const GemvExtras& x) {
  if ((x.norm && !ctx.device.tiled_norm) || (x.sibling_input >= 0 && !ctx.device.tiled_sibling)) {
    return false;
  }
  if ((!x.norm && x.sibling_input < 0) || !x.stacked.empty() || x.chain) return false;
  // The sibling's matrix is staged as B's is; its product is stored in f32 (the epilogue's).
  if (x.sibling_input >= 0 &&
      (x.sibling_dtype != ctx.inputs[1].dtype || x.sibling_product_dtype != DType::f32)) {
    return false;
  }
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  if (g.m == 1 || g.n == 1 || g.ta || ctx.device.max_workgroup_invocations < 256) return false;
  return !tensor_matmul_rejection(ctx, g, batch).empty() && !coop_rejection(ctx, g, batch).empty();
}

bool matmul_stores_permuted(const LowerContext& ctx) {
  if (!ctx.stored_shape || !ctx.stored_perm) return false;
  const MatmulGeometry g = geometry(ctx);
  if (numel(*ctx.stored_shape) != numel(g.out_batch) * g.m * g.n) return false;
  if (!tensor_matmul_rejection(ctx, g, numel(g.out_batch)).empty()) return true;
  return tensor_permuted_row_stride(ctx).has_value();
}

namespace {

Lowering lower_matmul(const LowerContext& ctx) { return lower_matmul_fused(ctx, nullptr); }

}  // namespace

void register_matmul_lowerings(LoweringRegistry& r) { r.add("matmul", lower_matmul); }

}  // namespace mn::codegen
