// Batched matmul with broadcast batch dims and transposed operands, in f32 arithmetic whatever
// the storage type.
//
// Tiled kernel: 256 threads (16×16) compute a 16T×16T output tile, each a T×T block (T = 4
// once both M and N fill 64, else 1). Every K step stages a 16-wide slab of both operands in
// shared memory; the thread-to-element map of those loads follows the operand's memory order
// (the contiguous axis is the fastest-varying one across threads), so every transpose
// combination reads whole contiguous runs: TILE floats along M/N, or 16 floats (64 bytes,
// whole 32-byte sectors) along K. With T = 4 a thread owns 4 consecutive rows and columns and
// reads each slab row as one vec4 from shared memory per operand (3 shared wavefronts per 16
// FMAs instead of 8: ~30 TFLOP/s on an H200, against ~24 with scalar reads); the pad of one
// vec4 per slab row keeps the staging stores mostly conflict-free. With T = 1 thread (tx, ty)
// owns row ty and column tx.
//
// Matrix-vector products (M = 1 or N = 1) run as a reduction over K instead: lanes split K
// when the matrix is contiguous along K, and threads take neighbouring outputs when it is
// contiguous along them, so that no lane of a 16×16 tile idles.
#include <algorithm>
#include <bit>
#include <limits>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "codegen/lower_matmul.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/matmul_epilogue.h"
#include "ir/ops/matmul.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

// Statements declaring abase and bbase, the operands' offsets for output batch `bz`.
std::string batch_bases(const MatmulGeometry& g) {
  std::string s = glsl::unravel(g.out_batch, "bz", "q");
  s += "  uint abase = " + glsl::broadcast_offset(g.a_batch, g.out_batch, "q") + " * " +
       ulit(g.m * g.k) + ";\n";
  s += "  uint bbase = " + glsl::broadcast_offset(g.b_batch, g.out_batch, "q") + " * " +
       ulit(g.k * g.n) + ";\n";
  return s;
}

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

Lowering lower_tiled(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                     const MatmulEpilogue* e) {
  // 64×64 tiles with 4×4 per thread once both sides fill them; 16×16 tiles otherwise.
  const int64_t t = (g.m >= 64 && g.n >= 64) ? 4 : 1;
  const int64_t tile = 16 * t;
  const std::string M = ulit(g.m), N = ulit(g.n), K = ulit(g.k), T = ulit(t), TILE = ulit(tile);
  // Bounds checks only where the shape does not divide into whole tiles.
  const bool check_m = g.m % tile != 0, check_n = g.n % tile != 0, check_k = g.k % 16 != 0;
  auto guard = [](std::initializer_list<std::pair<bool, std::string>> conds) {
    std::string s;
    for (const auto& [need, c] : conds) {
      if (need) s += (s.empty() ? "" : " && ") + c;
    }
    return s;
  };

  if (ctx.device.max_workgroup_invocations < 256) {
    throw Error("matmul: the tiled kernel needs workgroups of 256 invocations; the device allows " +
                std::to_string(ctx.device.max_workgroup_invocations));
  }
  // Row tiles and batch share the y dimension of the grid, folded into z past its limit.
  const int64_t col_tiles = (g.n + tile - 1) / tile, row_tiles = (g.m + tile - 1) / tile;
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

  const bool vec = t == 4;
  std::string s = glsl::header() + operand_buffers(ctx);
  if (e) s += e->declarations;
  s += epilogue_function(e);
  if (vec) {
    s += "shared vec4 As4[16][17];\nshared vec4 Bs4[16][17];\n";
  } else {
    s += "shared float As[16][" + std::to_string(tile + 1) + "];\nshared float Bs[16][" +
         std::to_string(tile + 1) + "];\n";
  }
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x, tx = lid % 16u, ty = lid / 16u;\n";
  s += "  uint yz = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;\n";
  if (gy * gz != rows_total) s += "  if (yz >= " + ulit(rows_total) + ") return;\n";
  s += "  uint bz = yz / " + ulit(row_tiles) + ";\n";
  s += "  uint row0 = (yz % " + ulit(row_tiles) + ") * " + TILE + ", col0 = gl_WorkGroupID.x * " +
       TILE + ";\n";
  s += batch_bases(g);
  if (vec) {
    s += "  vec4 acc[4];\n  for (uint i = 0u; i < 4u; ++i) acc[i] = vec4(0.0);\n";
  } else {
    s += "  float acc[" + std::to_string(t) + "][" + std::to_string(t) + "];\n";
    s += "  for (uint i = 0u; i < " + T + "; ++i) for (uint j = 0u; j < " + T +
         "; ++j) acc[i][j] = 0.0;\n";
  }
  s += "  for (uint k0 = 0u; k0 < " + K + "; k0 += 16u) {\n";
  // 16×TILE elements per operand, 256 threads: `per_thread` rounds.
  s += "    for (uint e = 0u; e < " + ulit(16 * tile / 256) + "; ++e) {\n";
  s += "      uint idx = lid + e * 256u;\n";
  if (g.ta) {  // A stored [K, M]: M is contiguous
    s += "      uint mm = idx % " + TILE + ", kk = idx / " + TILE + ";\n";
  } else {  // A stored [M, K]: K is contiguous
    s += "      uint kk = idx % 16u, mm = idx / 16u;\n";
  }
  s += "      uint gm = row0 + mm, gk = k0 + kk;\n";
  const std::string a_off = g.ta ? "gk * " + M + " + gm" : "gm * " + K + " + gk";
  const std::string a_guard = guard({{check_m, "gm < " + M}, {check_k, "gk < " + K}});
  s += std::string(vec ? "      As4[kk][mm >> 2][mm & 3u] = " : "      As[kk][mm] = ") +
       (a_guard.empty() ? "A_ld(abase + " + a_off + ")"
                        : "(" + a_guard + ") ? A_ld(abase + " + a_off + ") : 0.0") +
       ";\n";
  if (g.tb) {  // B stored [N, K]: K is contiguous
    s += "      uint kb = idx % 16u, nn = idx / 16u;\n";
  } else {  // B stored [K, N]: N is contiguous
    s += "      uint nn = idx % " + TILE + ", kb = idx / " + TILE + ";\n";
  }
  s += "      uint gn = col0 + nn, gkb = k0 + kb;\n";
  const std::string b_off = g.tb ? "gn * " + K + " + gkb" : "gkb * " + N + " + gn";
  const std::string b_guard = guard({{check_n, "gn < " + N}, {check_k, "gkb < " + K}});
  s += std::string(vec ? "      Bs4[kb][nn >> 2][nn & 3u] = " : "      Bs[kb][nn] = ") +
       (b_guard.empty() ? "B_ld(bbase + " + b_off + ")"
                        : "(" + b_guard + ") ? B_ld(bbase + " + b_off + ") : 0.0") +
       ";\n";
  s += "    }\n    barrier();\n";
  s += "    for (uint kk = 0u; kk < 16u; ++kk) {\n";
  if (vec) {
    s += "      vec4 a = As4[kk][ty], b = Bs4[kk][tx];\n";
    s += "      acc[0] += a.x * b; acc[1] += a.y * b; acc[2] += a.z * b; acc[3] += a.w * b;\n";
  } else {
    s += "      float a[" + std::to_string(t) + "], b[" + std::to_string(t) + "];\n";
    s += "      for (uint i = 0u; i < " + T + "; ++i) a[i] = As[kk][ty + 16u * i];\n";
    s += "      for (uint j = 0u; j < " + T + "; ++j) b[j] = Bs[kk][tx + 16u * j];\n";
    s += "      for (uint i = 0u; i < " + T + "; ++i) for (uint j = 0u; j < " + T +
         "; ++j) acc[i][j] += a[i] * b[j];\n";
  }
  s += "    }\n    barrier();\n  }\n";
  s += "  uint cbase = bz * " + ulit(g.m * g.n) + ";\n";
  s += "  for (uint i = 0u; i < " + T + "; ++i) for (uint j = 0u; j < " + T + "; ++j) {\n";
  s += vec ? "    uint gm = row0 + ty * 4u + i, gn = col0 + tx * 4u + j;\n"
           : "    uint gm = row0 + ty + 16u * i, gn = col0 + tx + 16u * j;\n";
  const std::string c_guard = guard({{check_m, "gm < " + M}, {check_n, "gn < " + N}});
  s += "    " + (c_guard.empty() ? "" : "if (" + c_guard + ") ") + "C_st(cbase + gm * " + N +
       " + gn, mm_epilogue(acc[i][j], bz, gm, gn));\n";
  s += "  }\n}\n";

  KernelLaunch k;
  k.name = "matmul_" + std::to_string(tile) + "x" + std::to_string(tile);
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

// M = 1 or N = 1: out[bz, p] = sum_k vec[k] · mat[p, k], with p over the matrix's other axis.
// The vector is contiguous along K whatever its flags (its other extent is 1). When the grid
// is small and K long, K splits into chunks whose partial sums a second launch adds up.
Lowering lower_gemv(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                    const MatmulEpilogue* e) {
  const bool left = g.m == 1;  // x·B: the matrix is B and p runs over N
  const int64_t p_count = left ? g.n : g.m;
  // Strides of the matrix along p and along k.
  int64_t sp = 0, sk = 0;
  if (left) {
    sp = g.tb ? g.k : 1;
    sk = g.tb ? 1 : g.n;
  } else {
    sp = g.ta ? 1 : g.k;
    sk = g.ta ? g.m : 1;
  }
  const bool k_contiguous = sk == 1 && g.k > 1;
  const uint32_t threads =
      std::min<uint32_t>(256, std::bit_floor(ctx.device.max_workgroup_invocations));
  uint32_t lx = 0, ly = 0;
  if (k_contiguous) {  // lanes along K, as rows of a reduction
    ly = std::min<uint32_t>(threads,
                            std::max<uint32_t>(32, std::bit_ceil(static_cast<uint64_t>(g.k))));
    lx = threads / ly;
  } else if (g.k <= 16 || (p_count * batch >= 8192 && g.k <= 256)) {
    lx = threads / 2;  // one thread per output, neighbours reading neighbouring addresses
    ly = 1;
  } else {
    lx = std::min<uint32_t>(32, std::bit_ceil(static_cast<uint64_t>(p_count)));
    ly = std::min<uint32_t>(threads / lx, std::bit_ceil(static_cast<uint64_t>(g.k)));
  }
  const int64_t blocks = (p_count + lx - 1) / lx;
  const int64_t outputs = p_count * batch;
  // Split K when there are too few groups to keep a large device's memory busy: ~2048
  // groups, each lane still summing >= 16 products, and at most 256 partials for the second
  // launch's one thread per output to add.
  const int64_t per_lane = (g.k + ly - 1) / ly;
  int64_t split = 1, chunk = g.k;
  if (blocks * batch < 1024 && per_lane >= 64) {
    split = std::min<int64_t>({(2048 + blocks * batch - 1) / (blocks * batch), per_lane / 16, 256});
    chunk = (g.k + split - 1) / split;
    split = (g.k + chunk - 1) / chunk;
  }
  const int64_t total = blocks * batch * split;
  const std::string LX = ulit(lx), L = std::to_string(lx * ly);

  std::string s = glsl::header() + glsl::buffer(0, ctx.inputs[0].dtype, "A", true) +
                  glsl::buffer(1, ctx.inputs[1].dtype, "B", true);
  s += split == 1 ? glsl::buffer(2, ctx.node.type.dtype, "C", false)
                  : "layout(std430, set = 0, binding = 2) buffer Buffer2 { float part[]; };\n";
  if (split == 1 && e) s += e->declarations;
  if (split == 1) s += epilogue_function(e);
  if (ly > 1) s += "shared float s_acc[" + L + "];\n";
  s += "void main() {\n";
  s += "  uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;\n";
  s += "  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (g >= " + ulit(total) + ") return;\n";  // uniform per group
  s += "  uint s = g / " + ulit(blocks * batch) + ", gb = g % " + ulit(blocks * batch) + ";\n";
  s +=
      "  uint bz = gb / " + ulit(blocks) + ", p = (gb % " + ulit(blocks) + ") * " + LX + " + lx;\n";
  s += batch_bases(g);
  s += "  bool live = p < " + ulit(p_count) + ";\n";
  s += "  uint k1 = min((s + 1u) * " + ulit(chunk) + ", " + ulit(g.k) + ");\n";
  const std::string vec = left ? "A_ld(abase + k)" : "B_ld(bbase + k)";
  const std::string mat = left ? "B_ld(bbase + p * " + ulit(sp) + " + k * " + ulit(sk) + ")"
                               : "A_ld(abase + p * " + ulit(sp) + " + k * " + ulit(sk) + ")";
  s += "  float acc = 0.0;\n";
  s += "  if (live) for (uint k = s * " + ulit(chunk) + " + ly; k < k1; k += " + ulit(ly) +
       ") acc += " + vec + " * " + mat + ";\n";
  if (ly > 1) {
    s += "  s_acc[ly * " + LX + " + lx] = acc;\n  barrier();\n";
    s += "  for (uint h = " + ulit(ly / 2) + "; h > 0u; h >>= 1) {\n";
    s += "    if (ly < h) s_acc[ly * " + LX + " + lx] += s_acc[(ly + h) * " + LX + " + lx];\n";
    s += "    barrier();\n  }\n";
    s += "  acc = s_acc[lx];\n";
  }
  const std::string o = "bz * " + ulit(p_count) + " + p";
  s += split == 1
           ? "  if (ly == 0u && live) C_st(" + o + ", mm_epilogue(acc, bz, " +
                 (left ? "0u, p" : "p, 0u") + "));\n}\n"
           : "  if (ly == 0u && live) part[s * " + ulit(outputs) + " + " + o + "] = acc;\n}\n";

  KernelLaunch k;
  k.name = split == 1 ? "matmul_gemv" : "matmul_gemv_partial";
  k.glsl = std::move(s);
  k.workgroup = {lx, ly, 1};
  k.groups = glsl::linear_grid(static_cast<uint64_t>(total) * lx * ly, ctx.device, lx * ly).groups;
  Lowering l;
  if (split == 1) {
    k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
    if (e) {
      for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
    }
    l.launches.push_back(std::move(k));
    return l;
  }
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::scratch(0), true}};
  l.launches.push_back(std::move(k));
  l.scratch_bytes.push_back(static_cast<uint64_t>(split * outputs) * 4);
  // The partial sums of each output, added in chunk order.
  const std::string decl =
      "layout(std430, set = 0, binding = 0) readonly buffer Buffer0 { float part[]; };\n" +
      glsl::buffer(1, ctx.node.type.dtype, "C", false) + (e ? e->declarations : std::string()) +
      epilogue_function(e);
  // Output i is batch i / p_count, element p = i % p_count: (m, n) = (0, p) or (p, 0).
  const std::string p_of = "i % " + ulit(p_count), b_of = "i / " + ulit(p_count);
  const std::string body = "  float acc = 0.0;\n  for (uint s = 0u; s < " + ulit(split) +
                           "; ++s) acc += part[s * " + ulit(outputs) +
                           " + i];\n  C_st(i, mm_epilogue(acc, " + b_of + ", " +
                           (left ? "0u, " + p_of : p_of + ", 0u") + "));\n";
  KernelLaunch c =
      glsl::elementwise_launch("matmul_gemv_combine", decl, body, static_cast<uint64_t>(outputs),
                               ctx.device, {{ArgRef::scratch(0), false}, {ArgRef::output(), true}});
  if (e) {
    // Binding 2 is unused (the epilogue's operands start at 3, as in the other kernels).
    c.bindings.push_back({ArgRef::scratch(0), false});
    for (const ArgRef& a : e->extra) c.bindings.push_back({a, false});
  }
  l.launches.push_back(std::move(c));
  return l;
}

}  // namespace

Lowering lower_matmul_fused(const LowerContext& ctx, const MatmulEpilogue* e) {
  glsl::require_storage(ctx);
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  check_elements(g, batch);
  if (g.m == 1 || g.n == 1) return lower_gemv(ctx, g, batch, e);
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
