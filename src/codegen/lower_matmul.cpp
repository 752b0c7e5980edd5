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
    // 64×64 tiles with 4×4 per thread once both sides fill them; 16×16 tiles otherwise.
    t = (g.m >= 64 && g.n >= 64) ? 4 : 1;
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
// products, so their latency hides behind them).
std::string slab_loads(const MatmulGeometry& g, const TiledConfig& c) {
  const std::string M = ulit(g.m), N = ulit(g.n), K = ulit(g.k);
  const std::string a_off = g.ta ? "gk * " + M + " + gm" : "gm * " + K + " + gk";
  const std::string a_guard = guard({{c.check_m, "gm < " + M}, {c.check_k, "gk < " + K}});
  const std::string a_load = a_guard.empty()
                                 ? "A_ld(abase + " + a_off + ")"
                                 : "(" + a_guard + ") ? A_ld(abase + " + a_off + ") : 0.0";
  const std::string b_off = g.tb ? "gn * " + K + " + gkb" : "gkb * " + N + " + gn";
  const std::string b_guard = guard({{c.check_n, "gn < " + N}, {c.check_k, "gkb < " + K}});
  const std::string b_load = b_guard.empty()
                                 ? "B_ld(bbase + " + b_off + ")"
                                 : "(" + b_guard + ") ? B_ld(bbase + " + b_off + ") : 0.0";
  // Unrolled here: registers indexed by a literal stay registers.
  std::string s;
  for (int64_t e = 0; e < c.per_thread; ++e) {
    const std::string E = std::to_string(e);
    s += "    {\n" + slab_coords(g, c, e);
    s += "      uint gm = row0 + mm, gk = kn + kk, gn = col0 + nn, gkb = kn + kb;\n";
    s += "      ra[" + E + "] = " + a_load + ";\n      rb[" + E + "] = " + b_load + ";\n    }\n";
  }
  return s;
}

// Stores the registers into the shared slabs.
std::string slab_stores(const MatmulGeometry& g, const TiledConfig& c) {
  std::string s;
  for (int64_t e = 0; e < c.per_thread; ++e) {
    const std::string E = std::to_string(e);
    s += "    {\n" + slab_coords(g, c, e);
    s += c.t == 4 ? "      As4[kk][mm >> 2][mm & 3u] = ra[" + E + "];\n      Bs4[kb][nn >> 2][nn & 3u] = rb[" + E + "];\n"
                  : "      As[kk][mm] = ra[" + E + "];\n      Bs[kb][nn] = rb[" + E + "];\n";
    s += "    }\n";
  }
  return s;
}

// The products of one staged slab. With T = 4 a thread owns 4 consecutive rows and columns and
// reads each slab row as one vec4 per operand (3 shared wavefronts per 16 FMAs instead of 8);
// with T = 1 thread (tx, ty) owns row ty and column tx.
std::string slab_products(const TiledConfig& c) {
  std::string s = "    for (uint kk = 0u; kk < " + ulit(c.ks) + "; ++kk) {\n";
  if (c.t == 4) {
    s += "      vec4 a = As4[kk][ty], b = Bs4[kk][tx];\n";
    s += "      acc[0] += a.x * b; acc[1] += a.y * b; acc[2] += a.z * b; acc[3] += a.w * b;\n";
  } else {
    s += "      acc[0][0] += As[kk][ty] * Bs[kk][tx];\n";
  }
  s += "    }\n";
  return s;
}

Lowering lower_tiled(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                     const MatmulEpilogue* e) {
  const TiledConfig c(g);
  const std::string M = ulit(g.m), N = ulit(g.n), K = ulit(g.k), T = ulit(c.t), TILE = ulit(c.tile);
  const std::string KS = ulit(c.ks), PT = ulit(c.per_thread);

  if (ctx.device.max_workgroup_invocations < 256) {
    throw Error("matmul: the tiled kernel needs workgroups of 256 invocations; the device allows " +
                std::to_string(ctx.device.max_workgroup_invocations));
  }
  // Row tiles and batch share the y dimension of the grid, folded into z past its limit.
  const int64_t col_tiles = (g.n + c.tile - 1) / c.tile, row_tiles = (g.m + c.tile - 1) / c.tile;
  const int64_t rows_total = row_tiles * batch;
  const int64_t limit = ctx.device.max_group_count;
  if (col_tiles > limit) {
    throw Error("matmul: N = " + std::to_string(g.n) + " needs " + std::to_string(col_tiles) +
                " column tiles, more than the device's " + std::to_string(limit) + " groups");
  }
  const int64_t gy = std::min(rows_total, limit), gz = (rows_total + gy - 1) / gy;
  if (gz > limit) {
    throw Error("matmul: " + std::to_string(rows_total) +
                " row tiles × batches exceed the device's grid limits");
  }

  std::string s = glsl::header() + operand_buffers(ctx);
  if (e) s += e->declarations;
  s += epilogue_function(e);
  // One vec4 of pad per slab row keeps the staging stores mostly conflict-free.
  s += c.t == 4 ? "shared vec4 As4[" + KS + "][17];\nshared vec4 Bs4[" + KS + "][17];\n"
                : "shared float As[16][17];\nshared float Bs[16][17];\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x, tx = lid % 16u, ty = lid / 16u;\n";
  s += "  uint yz = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;\n";
  if (gy * gz != rows_total) s += "  if (yz >= " + ulit(rows_total) + ") return;\n";
  s += "  uint bz = yz / " + ulit(row_tiles) + ";\n";
  s += "  uint row0 = (yz % " + ulit(row_tiles) + ") * " + TILE + ", col0 = gl_WorkGroupID.x * " +
       TILE + ";\n";
  s += batch_bases(g);
  s += c.t == 4 ? "  vec4 acc[4];\n  for (uint i = 0u; i < 4u; ++i) acc[i] = vec4(0.0);\n"
                : "  float acc[1][1];\n  acc[0][0] = 0.0;\n";
  // The next slab is in flight while this one's products run: one slab of registers, two
  // barriers a slab (staged, then consumed).
  s += "  float ra[" + PT + "], rb[" + PT + "];\n  uint kn = 0u;\n";
  s += slab_loads(g, c);
  s += "  for (uint k0 = 0u; k0 < " + K + "; k0 += " + KS + ") {\n";
  s += slab_stores(g, c);
  s += "    barrier();\n    kn = k0 + " + KS + ";\n    if (kn < " + K + ") {\n";
  s += slab_loads(g, c);
  s += "    }\n";
  s += slab_products(c);
  s += "    barrier();\n  }\n";
  s += "  uint cbase = bz * " + ulit(g.m * g.n) + ";\n";
  s += "  for (uint i = 0u; i < " + T + "; ++i) for (uint j = 0u; j < " + T + "; ++j) {\n";
  s += c.t == 4 ? "    uint gm = row0 + ty * 4u + i, gn = col0 + tx * 4u + j;\n"
                : "    uint gm = row0 + ty, gn = col0 + tx;\n";
  const std::string c_guard = guard({{c.check_m, "gm < " + M}, {c.check_n, "gn < " + N}});
  s += "    " + (c_guard.empty() ? "" : "if (" + c_guard + ") ") + "C_st(cbase + gm * " + N +
       " + gn, mm_epilogue(acc[i][j], bz, gm, gn));\n";
  s += "  }\n}\n";

  KernelLaunch k;
  k.name = "matmul_" + std::to_string(c.tile) + "x" + std::to_string(c.tile);
  k.glsl = std::move(s);
  k.workgroup = {256, 1, 1};
  k.groups = {static_cast<uint32_t>(col_tiles), static_cast<uint32_t>(gy),
              static_cast<uint32_t>(gz)};
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  if (e) {
    for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
  }
  Lowering l;
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
  if (extras && !gemv_takes_extras(ctx)) {
    throw Error("matmul: this product's kernel cannot take a norm or a sibling product");
  }
  if (g.m == 1 || g.n == 1) return lower_gemv(ctx, g, batch, e, extras);
  if (tensor_matmul_rejection(ctx, g, batch).empty()) {
    const TensorTile& t = tensor_tiles()[static_cast<size_t>(*choose_tensor_tile(ctx, g, batch))];
    return lower_matmul_tensor(ctx, g, batch, t, e);
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
  return lower_tiled(ctx, g, batch, e);
}

namespace {

Lowering lower_matmul(const LowerContext& ctx) { return lower_matmul_fused(ctx, nullptr); }

}  // namespace

void register_matmul_lowerings(LoweringRegistry& r) { r.add("matmul", lower_matmul); }

}  // namespace mn::codegen
