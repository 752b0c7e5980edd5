// Workgroup-scope cooperative-matrix matmul.
//
// The GLSL is written with GL_NV_cooperative_matrix types whose scope is gl_ScopeWorkgroup
// (Debian's glslang accepts any scope and size there); the launch is marked coop_khr, so the
// SPIR-V is rewritten to SPV_KHR_cooperative_matrix types, which VK_NV_cooperative_matrix2
// allows at workgroup scope with flexible dimensions.
//
// Every K step loads a bm×bk matrix of A and a bk×bn matrix of B directly from the operands
// (a transposed operand column-major) and accumulates their product; the driver stages and
// splits the work among the subgroups. Loads have no bounds: f32 operands are packed into f16
// copies zero-padded to whole tiles (the zeros in K add nothing), f16 operands must be
// multiples of the tile. An f32 result without epilogue whose tiles cover it exactly is
// stored by the matrix store; otherwise the accumulator goes to an f32 scratch slot of the
// tile (shared memory is too small for it: 48 KiB on NVIDIA), and each invocation reads values
// from there and stores them through `mm_epilogue` with bounds checks, as the other matmul
// kernels do.
#include "codegen/lower_matmul_coop_wg.h"

#include <algorithm>
#include <array>
#include <limits>

#include "codegen/glsl.h"
#include "codegen/lower_matmul_coop.h"

namespace mn::codegen {

namespace {

// Measured on an H200 (docs/perf.md), f16 operands at 8192³: 128×256×64 with 256 invocations
// 267 TFLOP/s, 128×128×64 with 128 invocations 242; K steps of 32 or 128, 256-row tiles,
// 128×512 and 256×256 tiles, and loads one step ahead were all slower.
constexpr std::array<CoopWgTile, 2> kTiles{{
    {"w128x128", 128, 128, 64, 128},
    {"w128x256", 128, 256, 64, 256},
}};

using glsl::ulit;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// f16 operands are read in place: they must be whole tiles. The padded copies and the tile
// scratch must stay within 32-bit indices.
bool operands_fit(const CoopWgTile& t, const MatmulGeometry& g, const LowerContext& ctx) {
  const bool f16_a = ctx.inputs[0].dtype == DType::f16, f16_b = ctx.inputs[1].dtype == DType::f16;
  if ((f16_a || f16_b) && g.k % t.bk) return false;
  if (f16_a && g.m % t.bm) return false;
  if (f16_b && g.n % t.bn) return false;
  const int64_t mp = round_up(g.m, t.bm), np = round_up(g.n, t.bn), kp = round_up(g.k, t.bk);
  const int64_t u32_max = std::numeric_limits<uint32_t>::max() - 16;
  return numel(g.a_batch) * mp * kp <= u32_max && numel(g.b_batch) * kp * np <= u32_max &&
         numel(g.out_batch) * mp * np <= u32_max;
}

}  // namespace

bool workgroup_tile_fits(int bm, int bn, int bk, uint32_t invocations,
                         const std::array<std::array<uint32_t, 3>, 4>& granularity,
                         const DeviceTraits& d) {
  for (size_t i = 0; i < granularity.size(); ++i) {
    if (invocations != 32u << i) continue;
    const auto& gr = granularity[i];
    if (gr[0] == 0 || bm % gr[0] || bn % gr[1] || bk % gr[2]) return false;
    const auto mx = static_cast<int>(d.coop_wg_max_dimension);
    return !(mx && (bm > mx || bn > mx || bk > mx)) && invocations <= d.max_workgroup_invocations;
  }
  return false;
}

bool coop_wg_tile_supported(const CoopWgTile& t, const DeviceTraits& d) {
  return workgroup_tile_fits(t.bm, t.bn, t.bk, t.invocations, d.coop_wg_granularity, d);
}

std::string coop_wg_exponent(const std::string& name, int64_t halves) {
  const auto at = static_cast<int64_t>(coop_packed_exponent_index(halves));
  return "int(uint(float16BitsToUint16(" + name + "[" + ulit(at) +
         "])) | (uint(float16BitsToUint16(" + name + "[" + ulit(at + 1) + "])) << 16))";
}

std::string coop_wg_product(const CoopWgProduct& p) {
  const CoopWgTile& t = *p.tile;
  const int64_t tiles = p.row_tiles * p.col_tiles, total = tiles * p.batches;
  const std::string BM = std::to_string(t.bm), BN = std::to_string(t.bn), BK = std::to_string(t.bk);
  std::string s;
  s += "#define COOP_A fcoopmatNV<16, gl_ScopeWorkgroup, " + BM + ", " + BK + ">\n";
  s += "#define COOP_B fcoopmatNV<16, gl_ScopeWorkgroup, " + BK + ", " + BN + ">\n";
  s += "#define COOP_C fcoopmatNV<32, gl_ScopeWorkgroup, " + BM + ", " + BN + ">\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x;\n";
  s += "  uint wid = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (wid >= " + ulit(total) + ") return;\n";
  s += "  uint bz = wid / " + ulit(tiles) + ", tid = wid % " + ulit(tiles) + ";\n";
  s += coop_tile_origin(8, p.row_tiles, p.col_tiles, t.bm, t.bn);
  s += p.setup;
  s += "  COOP_C acc = COOP_C(0.0);\n";
  s += "  for (uint k = " + p.k_begin + "; k < " + p.k_end + "; k += " + ulit(t.bk) + ") {\n";
  s += "    COOP_A a;\n    COOP_B b;\n";
  s += "    coopMatLoadNV(a, HA, (" + p.a_base + ") + " +
       (p.ta ? "k * " + ulit(p.lda) + " + row0, " + ulit(p.lda) + ", true"
             : "row0 * " + ulit(p.lda) + " + k, " + ulit(p.lda) + ", false") +
       ");\n";
  s += "    coopMatLoadNV(b, HB, (" + p.b_base + ") + " +
       (p.tb ? "col0 * " + ulit(p.ldb) + " + k, " + ulit(p.ldb) + ", true"
             : "k * " + ulit(p.ldb) + " + col0, " + ulit(p.ldb) + ", false") +
       ");\n";
  s += "    acc = coopMatMulAddNV(a, b, acc);\n  }\n";
  if (!p.scale.empty()) s += "  acc = acc * (" + p.scale + ");\n";
  if (!p.direct_offset.empty()) {
    s += "  coopMatStoreNV(acc, C, " + p.direct_offset + ", " + ulit(p.ldc) + ", false);\n}\n";
    return s;
  }
  // The tile's f32 slot in W, at (batch, row tile, column tile).
  s += "  uint wbase = ((bz * " + ulit(p.row_tiles) + " + row0 / " + ulit(t.bm) + ") * " +
       ulit(p.col_tiles) + " + col0 / " + ulit(t.bn) + ") * " + ulit(t.bm * t.bn) + ";\n";
  s += "  coopMatStoreNV(acc, WS, wbase, " + ulit(t.bn) + ", false);\n";
  if (!p.store.empty()) {
    // Every invocation stores its values once all of W's tile is written: no operand of the
    // store is read after C is written.
    s += "  memoryBarrierBuffer();\n  barrier();\n";
    s +=
        "  for (uint i = lid; i < " + ulit(t.bm * t.bn) + "; i += " + ulit(t.invocations) + ") {\n";
    s += "    uint gm = row0 + i / " + ulit(t.bn) + ", gn = col0 + i % " + ulit(t.bn) + ";\n";
    s += "    if (gm < " + ulit(p.m) + " && gn < " + ulit(p.n) +
         ") {\n      float v = WS[wbase + i];\n" + p.store + "    }\n  }\n";
  }
  s += "}\n";
  return s;
}

std::string coop_wg_header() {
  return "#version 450\n"
         "#extension GL_EXT_shader_16bit_storage : require\n"
         "#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require\n"
         "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
         "#extension GL_KHR_memory_scope_semantics : require\n"
         "#extension GL_NV_cooperative_matrix : require\n"
         "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n";
}

std::string coop_wg_operand_buffers(uint32_t a_binding, uint32_t w_binding, bool with_w) {
  const std::string a = std::to_string(a_binding), b = std::to_string(a_binding + 1);
  std::string s = "layout(std430, set = 0, binding = " + a + ") readonly buffer Buffer" + a +
                  " { float16_t HA[]; };\n";
  s += "layout(std430, set = 0, binding = " + b + ") readonly buffer Buffer" + b +
       " { float16_t HB[]; };\n";
  if (with_w) {
    s += "layout(std430, set = 0, binding = " + std::to_string(w_binding) +
         ") coherent buffer BufferWS { float WS[]; };\n";
  }
  return s;
}

std::array<uint32_t, 3> coop_wg_grid(int64_t groups, const DeviceTraits& d, const char* what) {
  const int64_t limit = d.max_group_count;
  const int64_t gx = std::min(groups, limit), gy = (groups + gx - 1) / gx;
  if (gy > limit) throw Error(std::string(what) + ": too many tiles for the device's grid");
  return {static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), 1};
}

std::span<const CoopWgTile> coop_wg_tiles() { return kTiles; }

bool coop_wg_tile_usable(size_t i, const DeviceTraits& d) {
  return (d.coop_tiles >> (kCoopWgTileBit + static_cast<int>(i)) & 1u) &&
         coop_wg_tile_supported(kTiles.at(i), d);
}

std::optional<int> choose_coop_wg_tile(const LowerContext& ctx, const MatmulGeometry& g,
                                       int64_t batch) {
  const DeviceTraits& d = ctx.device;
  const std::string& force = d.coop_wg_tile;
  const int64_t want = d.groups_to_fill();
  std::optional<int> best;
  for (int i = 0; i < static_cast<int>(kTiles.size()); ++i) {
    const CoopWgTile& t = kTiles[static_cast<size_t>(i)];
    if (!coop_wg_tile_usable(static_cast<size_t>(i), d) || !operands_fit(t, g, ctx)) continue;
    if (!force.empty()) {
      if (force == t.name) return i;
      continue;
    }
    // Below a full wave the subgroup kernel's smaller tiles are faster (docs/perf.md).
    const int64_t groups = ((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn) * batch;
    if (groups >= want) best = i;
  }
  return best;
}

std::string coop_wg_rejection(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch) {
  const DeviceTraits& d = ctx.device;
  if (!d.coop) return "the device has no usable cooperative matrices";
  if (!d.coop_wg) {
    return "workgroup-scope kernel turned off (MN_COOP_WG=0)";
  }
  for (int i = 0; i < 2; ++i) {
    const DType dt = ctx.inputs[static_cast<size_t>(i)].dtype;
    if (dt != DType::f32 && dt != DType::f16) return "operand dtype is neither f32 nor f16";
  }
  if (!choose_coop_wg_tile(ctx, g, batch)) return "no workgroup-scope tile fits";
  return {};
}

Lowering lower_matmul_coop_wg(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                              const CoopWgTile& t, const MatmulEpilogue* e) {
  const DType in_a = ctx.inputs[0].dtype, in_b = ctx.inputs[1].dtype;
  if ((in_a != DType::f32 && in_a != DType::f16) || (in_b != DType::f32 && in_b != DType::f16)) {
    throw Error("matmul (cooperative, workgroup): operands must be f32 or f16");
  }
  if (!operands_fit(t, g, ctx)) {
    throw Error(std::string("matmul (cooperative, workgroup): f16 operands are not whole ") +
                t.name + " tiles");
  }
  const bool pack_a = in_a == DType::f32, pack_b = in_b == DType::f32;
  // Extents as the kernel reads them: packed copies are padded to whole tiles.
  const int64_t mp = round_up(g.m, t.bm), np = round_up(g.n, t.bn), kp = round_up(g.k, t.bk);
  const int64_t a_size = mp * kp, b_size = kp * np;
  CoopWgProduct p;
  p.tile = &t;
  p.batches = batch;
  p.row_tiles = mp / t.bm;
  p.col_tiles = np / t.bn;
  p.m = g.m;
  p.n = g.n;
  // Leading dimensions: A is M×K (K×M transposed), B is K×N (N×K transposed).
  p.ta = g.ta;
  p.tb = g.tb;
  p.lda = g.ta ? mp : kp;
  p.ldb = g.tb ? kp : np;
  p.setup = glsl::unravel(g.out_batch, "bz", "q");
  p.a_base = glsl::broadcast_offset(g.a_batch, g.out_batch, "q") + " * " + ulit(a_size);
  p.b_base = glsl::broadcast_offset(g.b_batch, g.out_batch, "q") + " * " + ulit(b_size);
  p.k_end = ulit(kp);
  // Packed operands were scaled by 2^e (the exponent after the packed halves): undo it.
  std::string ea = pack_a ? coop_wg_exponent("HA", numel(g.a_batch) * a_size) : "0";
  std::string eb = pack_b ? coop_wg_exponent("HB", numel(g.b_batch) * b_size) : "0";
  if (pack_a || pack_b) p.scale = "exp2(-float(" + ea + " + " + eb + "))";
  // f32 results without an epilogue, covered exactly by the tiles, are stored by the matrix
  // store itself.
  const bool direct = !e && ctx.node.type.dtype == DType::f32 && mp == g.m && np == g.n;
  std::string s =
      coop_wg_header() + coop_wg_operand_buffers(0, 3 + (e ? e->extra.size() : 0), !direct);
  if (direct) {
    s += "layout(std430, set = 0, binding = 2) writeonly buffer Buffer2 { float C[]; };\n";
    p.direct_offset = "bz * " + ulit(g.m * g.n) + " + row0 * " + ulit(g.n) + " + col0";
    p.ldc = g.n;
  } else {
    s += glsl::buffer(2, ctx.node.type.dtype, "C", false);
    if (e) s += e->declarations;
    s += epilogue_function(e);
    p.store = "      C_st(bz * " + ulit(g.m * g.n) + " + gm * " + ulit(g.n) +
              " + gn, mm_epilogue(v, bz, gm, gn));\n";
  }
  s += coop_wg_product(p);
  const int64_t total = p.row_tiles * p.col_tiles * batch;

  KernelLaunch k;
  k.name = std::string("matmul_coop_") + t.name;
  k.glsl = std::move(s);
  k.workgroup = {t.invocations, 1, 1};
  k.groups = coop_wg_grid(total, ctx.device, "matmul (cooperative, workgroup)");
  k.coop_khr = true;
  Lowering l;
  int scratch = 0;
  // Packed copies in the operands' storage order, padded to whole tiles.
  PackPadding pa{g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.ta ? kp : mp, g.ta ? mp : kp};
  PackPadding pb{g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.tb ? np : kp, g.tb ? kp : np};
  const ArgRef a_arg = pack_a ? pack_coop_operand(ctx, 0, l, scratch, &pa) : ArgRef::input(0);
  const ArgRef b_arg = pack_b ? pack_coop_operand(ctx, 1, l, scratch, &pb) : ArgRef::input(1);
  k.bindings = {{a_arg, false}, {b_arg, false}, {ArgRef::output(), true}};
  if (e) {
    for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
  }
  if (!direct) {
    k.bindings.push_back({ArgRef::scratch(scratch), true});
    l.scratch_bytes.push_back(static_cast<uint64_t>(total) * t.bm * t.bn * 4);
  }
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace mn::codegen
