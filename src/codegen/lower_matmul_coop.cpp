// Cooperative-matrix matmul kernel.
//
// A workgroup computes a bm×bn output tile; each subgroup a wm×wn block of it, as
// (wm/16)·(wn/16) f32 accumulator matrices. Every K step of bk, the workgroup converts a
// bm×bk slab of A and a bk×bn slab of B to f16 and stages them in shared memory, each in its
// operand's memory order (the contiguous axis stays contiguous, so global loads are 16-byte
// vectors along it and a transposed operand is read column-major by coopMatLoadNV instead of
// being transposed). Units of 8 halves (16 bytes) are the grain: a thread loads 8 consecutive
// elements (two vec4 of f32, or one uvec4 of f16), packs them and writes one uvec4 into
// shared memory. Rows of a staged slab are padded by one unit, which makes the eight 16-byte
// row segments a 16×16 fragment load touches fall into distinct banks.
//
// The next slab is loaded into registers before the current one is multiplied, so global
// latency overlaps the matrix work; with two shared stages the store of the next slab goes to
// the other stage and one barrier per step suffices.
//
// Results leave through a per-subgroup 16×16 f32 scratch in shared memory: each lane reads 8
// consecutive values of one row and stores them with `mm_epilogue` and bounds checks, so the
// output dtype, ragged edges and fused epilogues are handled exactly as in the scalar kernel.
#include "codegen/lower_matmul_coop.h"

#include <algorithm>
#include <array>
#include <limits>

#include "codegen/glsl.h"

namespace mn::codegen {

namespace {

constexpr std::array<CoopTile, 3> kTiles{{
    {"s", 64, 64, 32, 32, 32},
    {"m", 128, 128, 32, 64, 64},
    {"l", 128, 256, 32, 64, 64},
}};

using glsl::ulit;

// One operand's slab as staged: `rows` rows of `cols` contiguous elements.
struct Slab {
  int rows = 0, cols = 0;
  int stride_units() const { return cols / 8 + 1; }  // 16-byte units per row, padded
  int units() const { return rows * stride_units(); }
};

Slab slab_a(const CoopTile& t, const MatmulGeometry& g) {
  return g.ta ? Slab{t.bk, t.bm} : Slab{t.bm, t.bk};
}
Slab slab_b(const CoopTile& t, const MatmulGeometry& g) {
  return g.tb ? Slab{t.bn, t.bk} : Slab{t.bk, t.bn};
}

bool vector_dtype(DType d) { return d == DType::f32 || d == DType::f16; }

// The loader `uvec4 ld<name>(uint r, uint c)`: 8 halves from storage row r, columns c..c+7 of
// a rows×cols matrix with leading dimension ld, at <name>base; zeros past the edges.
// f32 values are multiplied by the operand's staging scale (s<name>, 1 unless scaled).
std::string loader(const std::string& name, DType dtype, int64_t rows, int64_t cols, bool vec_ok) {
  const std::string base = name == "A" ? "abase" : "bbase";
  const std::string scale = "s" + name;
  const std::string R = ulit(rows), C = ulit(cols);
  std::string s = "uvec4 ld" + name + "(uint r, uint c) {\n";
  if (vec_ok) {
    // cols % 8 == 0: a unit that starts inside a row lies wholly inside it.
    s += "  if (r >= " + R + " || c >= " + C + ") return uvec4(0u);\n";
    s += "  uint i = " + base + " + r * " + C + " + c;\n";
    if (dtype == DType::f16) {
      s += "  return " + name + "8[i >> 3];\n";
    } else {
      s += "  vec4 x = " + name + "4[i >> 2] * " + scale + ", y = " + name + "4[(i >> 2) + 1u] * " +
           scale + ";\n";
      s += "  return uvec4(packHalf2x16(x.xy), packHalf2x16(x.zw), packHalf2x16(y.xy), "
           "packHalf2x16(y.zw));\n";
    }
  } else {
    s += "  float v[8];\n";
    s += "  for (uint e = 0u; e < 8u; ++e) v[e] = (r < " + R + " && c + e < " + C + ") ? " + name +
         "_ld(" + base + " + r * " + C + " + c + e) * " + scale + " : 0.0;\n";
    s += "  return uvec4(packHalf2x16(vec2(v[0], v[1])), packHalf2x16(vec2(v[2], v[3])), "
         "packHalf2x16(vec2(v[4], v[5])), packHalf2x16(vec2(v[6], v[7])));\n";
  }
  s += "}\n";
  return s;
}

std::string operand_buffer(uint32_t binding, DType dtype, const std::string& name, bool vec) {
  if (!vec) return glsl::buffer(binding, dtype, name, true);
  const std::string b = std::to_string(binding);
  if (dtype == DType::f16) {
    return "layout(std430, set = 0, binding = " + b + ") readonly buffer Buffer" + b + " { uvec4 " +
           name + "8[]; };\n";
  }
  return "layout(std430, set = 0, binding = " + b + ") readonly buffer Buffer" + b + " { vec4 " +
         name + "4[]; };\n";
}

// Halves of a packed operand before its scale exponent (a whole number of 16-byte units).
uint64_t padded_halves(int64_t n) { return (static_cast<uint64_t>(n) + 7) / 8 * 8; }

const char* kMaxReduce = R"(  red[lid] = m;
  barrier();
  for (uint h = 128u; h > 0u; h >>= 1) {
    if (lid < h) red[lid] = max(red[lid], red[lid + h]);
    barrier();
  }
)";

// Largest |v| of each of `parts` strided portions of the source's values.
std::string absmax_kernel(const PackSource& src, uint64_t parts) {
  std::string s = glsl::header() + src.declarations;
  s += "layout(std430, set = 0, binding = " + std::to_string(src.bindings) +
       ") writeonly buffer BufferParts { float part[]; };\n";
  s += "shared float red[256];\nvoid main() {\n  uint lid = gl_LocalInvocationID.x;\n";
  s += "  float m = 0.0;\n";
  s += "  for (uint j = gl_WorkGroupID.x * 256u + lid; j < " +
       ulit(static_cast<int64_t>(src.source_count)) +
       "; j += " + ulit(static_cast<int64_t>(parts * 256)) + ") {\n    float v;\n" +
       src.source_value + "    m = max(m, abs(v));\n  }\n";
  s += kMaxReduce;
  s += "  if (lid == 0u) part[gl_WorkGroupID.x] = red[0];\n}\n";
  return s;
}

// Elements each invocation of the pack kernel converts: every workgroup first reduces the
// partial maxima to the scale (a loop and eight barriers), which one element a thread paid
// for every 256 elements (an im2col pack ran at ~250 GB/s on the H100).
constexpr uint32_t kPackPerThread = 16;

// f32 → f16 scaled by 2^e, e chosen from the operand's largest magnitude so that it lands
// near 2^15: small operands (activations and gradients deep in a network) keep their
// precision instead of underflowing to f16 subnormals or zero, large ones stay finite.
// Powers of two are exact, and the matmul divides them out of its f32 results. e follows the
// data (0 when it holds no finite non-zero value), and is stored after the packed halves.
// A workgroup converts kPackPerThread · 256 consecutive elements, each pass 256 of them.
std::string pack_kernel(const PackSource& src, uint64_t parts) {
  const std::string hb = std::to_string(src.bindings), pb = std::to_string(src.bindings + 1);
  std::string s = glsl::header() + src.declarations +
                  glsl::buffer(src.bindings, DType::f16, "H", false) +
                  coop_scale_exponent_function();
  s += "layout(std430, set = 0, binding = " + pb +
       ") readonly buffer BufferParts { float part[]; };\n";
  s += "shared float red[256];\nvoid main() {\n  uint lid = gl_LocalInvocationID.x;\n";
  s += "  float m = 0.0;\n";
  s += "  for (uint j = lid; j < " + ulit(static_cast<int64_t>(parts)) +
       "; j += 256u) m = max(m, part[j]);\n";
  s += kMaxReduce;
  s += "  int e = coop_scale_exponent(red[0]);\n";
  s += "  float scale = exp2(float(e));\n";
  s += "  uint base = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * " +
       ulit(int64_t{kPackPerThread} * 256) + ";\n";
  const std::string at = ulit(static_cast<int64_t>(padded_halves(static_cast<int64_t>(src.count))));
  s += "  if (base == 0u && lid == 0u) {\n    H_stb(" + at + ", uint(e) & 0xffffu);\n    H_stb(" +
       at + " + 1u, uint(e) >> 16);\n  }\n";
  s += "  for (uint pass = 0u; pass < " + ulit(kPackPerThread) + "; ++pass) {\n";
  s += "    uint i = base + pass * 256u + lid;\n";
  s += "    if (i >= " + ulit(static_cast<int64_t>(src.count)) + ") break;\n";
  s += "    float v;\n" + src.value + "    H_st(i, v * scale);\n  }\n}\n";
  return s;
}

// f32 input i as a PackSource: its values as they are, and the scale from them.
PackSource input_source(const LowerContext& ctx, int i) {
  const auto n = static_cast<uint64_t>(ctx.inputs[static_cast<size_t>(i)].numel());
  PackSource src;
  src.declarations = glsl::buffer(0, DType::f32, "X", true);
  src.bindings = 1;
  src.count = src.source_count = n;
  src.value = "  v = X_ld(i);\n";
  src.source_value = "    v = X_ld(j);\n";
  return src;
}

}  // namespace

std::span<const CoopTile> coop_tiles() { return kTiles; }

uint64_t coop_packed_exponent_index(int64_t halves) { return padded_halves(halves); }

std::string coop_scale_exponent_function() {
  return "int coop_scale_exponent(float mx) {\n"
         "  if (!(mx > 0.0) || isinf(mx) || isnan(mx)) return 0;\n"
         "  int ex;\n  frexp(mx, ex);\n  return clamp(15 - ex, -100, 100);\n}\n";
}

std::string coop_staged_exponents(uint32_t threads, uint64_t parts_a, uint64_t parts_b,
                                  const std::string& scratch) {
  const std::string T = ulit(threads), X = scratch;
  std::string s = "  float ma = 0.0, mb = 0.0;\n";
  if (parts_a) {
    s += "  for (uint j = lid; j < " + ulit(static_cast<int64_t>(parts_a)) + "; j += " + T +
         ") ma = max(ma, PA[j]);\n";
  }
  if (parts_b) {
    s += "  for (uint j = lid; j < " + ulit(static_cast<int64_t>(parts_b)) + "; j += " + T +
         ") mb = max(mb, PB[j]);\n";
  }
  s += "  " + X + "[lid] = ma;\n  " + X + "[" + T + " + lid] = mb;\n  barrier();\n";
  s += "  for (uint h = " + ulit(threads / 2) + "; h > 0u; h >>= 1) {\n";
  s += "    if (lid < h) {\n      " + X + "[lid] = max(" + X + "[lid], " + X +
       "[lid + h]);\n      " + X + "[" + T + " + lid] = max(" + X + "[" + T + " + lid], " + X +
       "[" + T + " + lid + h]);\n    }\n    barrier();\n  }\n";
  s += "  int ea = coop_scale_exponent(" + X + "[0]), eb = coop_scale_exponent(" + X + "[" + T +
       "]);\n  barrier();\n";
  return s;
}

std::string coop_tile_origin(int64_t group_rows, int64_t row_tiles, int64_t col_tiles, int bm,
                             int bn) {
  std::string s = "  uint grp = tid / " + ulit(group_rows * col_tiles) + ";\n";
  s += "  uint rows_in = min(" + ulit(group_rows) + ", " + ulit(row_tiles) + " - grp * " +
       ulit(group_rows) + ");\n";
  s += "  uint in_grp = tid % " + ulit(group_rows * col_tiles) + ";\n";
  s += "  uint row0 = (grp * " + ulit(group_rows) + " + in_grp % rows_in) * " + ulit(bm) +
       ", col0 = (in_grp / rows_in) * " + ulit(bn) + ";\n";
  return s;
}

std::string coop_subgroup_products(const CoopTile& t, bool ta, bool tb, int64_t stride_a,
                                   int64_t stride_b, int halves) {
  const int fm = t.wm / 16, fn = t.wn / 16;
  const std::string SA = ulit(stride_a), SB = ulit(stride_b), H = ulit(halves);
  std::string s;
  for (int kk = 0; kk < t.bk; kk += 16) {
    const std::string KK = ulit(kk), KH = ulit(kk / halves);
    s += "    {\n";
    for (int i = 0; i < fm; ++i) {
      const std::string mo = "(wm0 + " + ulit(i * 16) + ")";
      s += "    F16 fa" + std::to_string(i) + ";\n    coopMatLoadNV(fa" + std::to_string(i) +
           ", S, abuf + " +
           (ta ? KK + " * " + SA + " + " + mo + " / " + H + ", " + SA + ", true"
               : mo + " * " + SA + " + " + KH + ", " + SA + ", false") +
           ");\n";
    }
    for (int j = 0; j < fn; ++j) {
      const std::string no = "(wn0 + " + ulit(j * 16) + ")";
      s += "    F16 fb" + std::to_string(j) + ";\n    coopMatLoadNV(fb" + std::to_string(j) +
           ", S, bbuf + " +
           (tb ? no + " * " + SB + " + " + KH + ", " + SB + ", true"
               : KK + " * " + SB + " + " + no + " / " + H + ", " + SB + ", false") +
           ");\n";
    }
    for (int i = 0; i < fm; ++i) {
      for (int j = 0; j < fn; ++j) {
        const std::string acc = "acc" + std::to_string(i) + "_" + std::to_string(j);
        s += "    " + acc + " = coopMatMulAddNV(fa" + std::to_string(i) + ", fb" +
             std::to_string(j) + ", " + acc + ");\n";
      }
    }
    s += "    }\n";
  }
  return s;
}

CoopMagnitude absmax_coop_source(const PackSource& src, std::span<const KernelBinding> reads,
                                 const std::string& name, Lowering& l, int& scratch) {
  CoopMagnitude out;
  out.parts = ArgRef::scratch(scratch++);
  out.count = std::max<uint64_t>(1, std::min<uint64_t>(1024, (src.source_count + 4095) / 4096));
  l.scratch_bytes.push_back(out.count * 4);
  KernelLaunch m;
  m.name = name + "_absmax";
  m.glsl = absmax_kernel(src, out.count);
  m.workgroup = {256, 1, 1};
  m.groups = {static_cast<uint32_t>(out.count), 1, 1};
  m.bindings.assign(reads.begin(), reads.end());
  m.bindings.push_back({out.parts, true});
  l.launches.push_back(std::move(m));
  return out;
}

ArgRef pack_coop_source(const PackSource& src, std::span<const KernelBinding> reads,
                        const std::string& name, const DeviceTraits& d, Lowering& l, int& scratch) {
  const ArgRef to = ArgRef::scratch(scratch++);
  l.scratch_bytes.push_back(padded_halves(static_cast<int64_t>(src.count)) * 2 + 16);
  const CoopMagnitude magnitude = absmax_coop_source(src, reads, name, l, scratch);
  const ArgRef stats = magnitude.parts;
  const uint64_t parts = magnitude.count;
  const glsl::Linear grid = glsl::linear_grid((src.count + kPackPerThread - 1) / kPackPerThread, d);
  KernelLaunch c;
  c.name = name + "_pack";
  c.glsl = pack_kernel(src, parts);
  c.workgroup = {grid.local, 1, 1};
  c.groups = grid.groups;
  c.bindings.assign(reads.begin(), reads.end());
  c.bindings.push_back({to, true});
  c.bindings.push_back({stats, false});
  l.launches.push_back(std::move(c));
  return to;
}

ArgRef pack_coop_operand(const LowerContext& ctx, int i, Lowering& l, int& scratch,
                         const PackPadding* pad) {
  PackSource src = input_source(ctx, i);
  const uint64_t n = src.count;
  if (pad) {
    // Every rows×cols matrix lands in a zero-filled rows_padded×cols_padded one.
    src.count = n / static_cast<uint64_t>(pad->rows * pad->cols) *
                static_cast<uint64_t>(pad->rows_padded * pad->cols_padded);
    const std::string rp = ulit(pad->rows_padded), cp = ulit(pad->cols_padded);
    src.value = "  uint b = i / (" + rp + " * " + cp + "), r = (i / " + cp + ") % " + rp +
                ", c = i % " + cp + ";\n  v = r < " + ulit(pad->rows) + " && c < " +
                ulit(pad->cols) + " ? X_ld((b * " + ulit(pad->rows) + " + r) * " + ulit(pad->cols) +
                " + c) : 0.0;\n";
  }
  const KernelBinding read{ArgRef::input(i), false};
  return pack_coop_source(src, std::span(&read, 1), "matmul_coop", ctx.device, l, scratch);
}

CoopMagnitude absmax_coop_operand(const LowerContext& ctx, int i, Lowering& l, int& scratch) {
  const KernelBinding read{ArgRef::input(i), false};
  return absmax_coop_source(input_source(ctx, i), std::span(&read, 1), "matmul_coop", l, scratch);
}

uint32_t coop_shared_bytes(const CoopTile& t, const MatmulGeometry& g, const CoopOptions& o) {
  const auto staging =
      static_cast<uint32_t>(o.stages * (slab_a(t, g).units() + slab_b(t, g).units()) * 16);
  return staging + static_cast<uint32_t>(t.subgroups() * 256 * 4);
}

CoopOptions coop_options_for(const CoopTile& t, const MatmulGeometry& g, const DeviceTraits& d) {
  CoopOptions o;
  const uint32_t limit = std::max(d.max_shared_bytes, d.max_shared_optin_bytes);
  o.stages = 2;
  if (d.coop_single_stage || coop_shared_bytes(t, g, o) > limit) o.stages = 1;
  o.prepack = d.coop_prepack;
  return o;
}

std::optional<int> choose_coop_tile(const MatmulGeometry& g, int64_t batch, const DeviceTraits& d) {
  const uint32_t limit = std::max(d.max_shared_bytes, d.max_shared_optin_bytes);
  const std::string& force = d.coop_subgroup_tile;  // measuring one tile everywhere
  const int64_t want = d.groups_to_fill();
  std::optional<int> best;
  for (int i = 0; i < static_cast<int>(kTiles.size()); ++i) {
    const CoopTile& t = kTiles[static_cast<size_t>(i)];
    if (!(d.coop_tiles >> i & 1u)) continue;
    if (static_cast<uint32_t>(t.subgroups()) * d.subgroup_size > d.max_workgroup_invocations) {
      continue;
    }
    CoopOptions o;
    o.stages = 1;
    if (coop_shared_bytes(t, g, o) > limit) continue;
    if (!force.empty()) {
      if (force == t.name) return i;
      continue;
    }
    const int64_t groups = ((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn) * batch;
    // The smallest acceptable tile is kept as a fallback; a larger one replaces it only when
    // its grid still fills the device.
    if (!best || groups >= want) best = i;
  }
  return best;
}

std::string coop_rejection(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch) {
  const DeviceTraits& d = ctx.device;
  if (!d.coop) return "the device has no usable cooperative matrices";
  if (d.subgroup_size != 32) return "subgroup size is not 32";
  if (d.max_workgroup_invocations < 256) return "workgroups of 256 invocations needed";
  for (int i = 0; i < 2; ++i) {
    if (!vector_dtype(ctx.inputs[static_cast<size_t>(i)].dtype)) {
      return "operand dtype is neither f32 nor f16";
    }
  }
  // Measured on an H200 (docs/perf.md): with M = 16 three quarters of the 64-row tile idle
  // and the scalar kernel is faster; from 32 on the cooperative kernel wins or ties.
  if (g.m < 32 || g.n < 32) return "M or N below 32";
  // A batch of rows by one weight (B unbatched, A's rows contiguous across the batch) is one
  // product of batch·M rows: SmolVLA's 8 chunks of 50 actions by a 2048 × 720 projection.
  const bool shared_weight = numel(g.b_batch) == 1 && !g.ta;
  const int64_t rows = shared_weight ? g.m * batch : g.m;
  if (rows * g.n * g.k < kCoopMinMacs || rows * g.n < kCoopMinOutputs) {
    return "below the size threshold";
  }
  // Short K on a medium output: the operands' f16 conversion launches cost more than the
  // tensor cores save. Measured on an H200 (docs/perf.md): M=256, K=576, N=1536 ran at 5.9
  // TFLOP/s against the scalar kernel's 7.1, while K=1536 (N=576) and M·N = 12.6M (N=49152)
  // won 2× and 1.6×. The output counts over the batch: a batch of rows by one weight is one
  // product of batch·M rows (SmolLM2's f32 step at 8 × 512, whose 4096 × 576 projections of
  // K = 576 took the scalar kernel by their 512 rows a sequence: 120.0-120.3 → 108.8-108.9 ms a
  // step on the H100 with them on tensor cores).
  // Or enough multiply-adds: SmolVLA's gate and up projections at batch 8 (400 rows by
  // 2048 × 720, 819200 outputs, 590M multiply-adds) took the loop from 57.5 to 52.5 ms on the
  // H100 on tensor cores, where Whisper-tiny's 1500 × 384 × 384 projections (576000 outputs,
  // 221M) were slower there (1.64 → 1.83 ms).
  const int64_t outputs = g.m * g.n * batch;
  if (g.k < kCoopShortK && outputs < kCoopShortKMinOutputs && outputs * g.k < kCoopShortKMinMacs) {
    return "short K on a medium output";
  }
  if (!choose_coop_tile(g, batch, d)) return "no tile configuration fits the device";
  return {};
}

Lowering lower_matmul_coop(const LowerContext& ctx, const MatmulGeometry& g, int64_t batch,
                           const CoopTile& t, const CoopOptions& o, const MatmulEpilogue* e) {
  const DType in_a = ctx.inputs[0].dtype, in_b = ctx.inputs[1].dtype;
  if (!vector_dtype(in_a) || !vector_dtype(in_b)) {
    throw Error("matmul (cooperative): operands must be f32 or f16");
  }
  const int subgroups = t.subgroups();
  const auto threads = static_cast<uint32_t>(subgroups * 32);
  const Slab sa = slab_a(t, g), sb = slab_b(t, g);
  // Storage extents of A (rows × cols, cols contiguous) and B.
  const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
  const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
  const bool vec_a = a_cols % 8 == 0, vec_b = b_cols % 8 == 0;
  const int a_units = sa.rows * sa.cols / 8, b_units = sb.rows * sb.cols / 8;
  if (a_units % static_cast<int>(threads) != 0 || b_units % static_cast<int>(threads) != 0) {
    throw Error(std::string("matmul (cooperative): tile ") + t.name +
                " does not divide among its threads");
  }
  const int ua = a_units / static_cast<int>(threads), ub = b_units / static_cast<int>(threads);
  const int fm = t.wm / 16, fn = t.wn / 16;
  const int64_t col_tiles = (g.n + t.bn - 1) / t.bn, row_tiles = (g.m + t.bm - 1) / t.bm;
  const int64_t tiles = col_tiles * row_tiles;
  // A is staged once per column tile, B once per row tile.
  const bool pack_a = o.prepack && in_a == DType::f32;
  const bool pack_b = o.prepack && in_b == DType::f32;
  // f32 operands staged as they are, scaled by a power of two from their largest magnitude.
  const bool scale_a = !o.prepack && o.scale_staged && in_a == DType::f32;
  const bool scale_b = !o.prepack && o.scale_staged && in_b == DType::f32;
  const DType da = pack_a ? DType::f16 : in_a, db = pack_b ? DType::f16 : in_b;
  // The magnitude launches of scaled operands, and where their partial maxima are bound.
  Lowering l;
  int scratch = 0;
  ArgRef a_arg = ArgRef::input(0), b_arg = ArgRef::input(1);
  if (pack_a) a_arg = pack_coop_operand(ctx, 0, l, scratch);
  if (pack_b) b_arg = pack_coop_operand(ctx, 1, l, scratch);
  std::optional<CoopMagnitude> mag_a, mag_b;
  if (scale_a) mag_a = absmax_coop_operand(ctx, 0, l, scratch);
  if (scale_b) mag_b = absmax_coop_operand(ctx, 1, l, scratch);
  const auto first_parts = static_cast<uint32_t>(3 + (e ? e->extra.size() : 0));
  const int64_t total = tiles * batch;
  const int64_t limit = ctx.device.max_group_count;
  const int64_t gx = std::min(total, limit), gy = (total + gx - 1) / gx;
  if (gy > limit) throw Error("matmul (cooperative): too many tiles for the device's grid");
  const int stage_units = sa.units() + sb.units();
  const int shared_units = o.stages * stage_units;  // the C scratch is separate

  std::string s =
      "#version 450\n"
      "#extension GL_EXT_shader_16bit_storage : require\n"
      "#extension GL_EXT_shader_explicit_arithmetic_types_int16 : enable\n"
      "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
      "#extension GL_KHR_memory_scope_semantics : require\n"
      "#extension GL_NV_cooperative_matrix : require\n"
      "#extension GL_KHR_shader_subgroup_basic : require\n"
      "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n";
  s += operand_buffer(0, da, "A", vec_a) + operand_buffer(1, db, "B", vec_b) +
       glsl::buffer(2, ctx.node.type.dtype, "C", false);
  if (e) s += e->declarations;
  s += epilogue_function(e);
  s += "shared uvec4 S[" + std::to_string(shared_units) + "];\n";
  s += "shared float Cs[" + std::to_string(subgroups * 256) + "];\n";
  if (mag_a) {
    s += "layout(std430, set = 0, binding = " + std::to_string(first_parts) +
         ") readonly buffer BufferPA { float PA[]; };\n";
  }
  if (mag_b) {
    s += "layout(std430, set = 0, binding = " + std::to_string(first_parts + (mag_a ? 1 : 0)) +
         ") readonly buffer BufferPB { float PB[]; };\n";
  }
  if (mag_a || mag_b) s += coop_scale_exponent_function();
  s += "uint abase, bbase;\nfloat sA = 1.0, sB = 1.0;\n";
  s += loader("A", da, a_rows, a_cols, vec_a) + loader("B", db, b_rows, b_cols, vec_b);
  s += "#define F16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>\n";
  s += "#define F32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;\n";
  s += "  uint wid = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  if (gx * gy != total) s += "  if (wid >= " + ulit(total) + ") return;\n";
  s += "  uint bz = wid / " + ulit(tiles) + ", tid = wid % " + ulit(tiles) + ";\n";
  s += coop_tile_origin(o.swizzle ? 8 : 1, row_tiles, col_tiles, t.bm, t.bn);
  s += glsl::unravel(g.out_batch, "bz", "q");
  s += "  abase = " + glsl::broadcast_offset(g.a_batch, g.out_batch, "q") + " * " +
       ulit(g.m * g.k) + ";\n";
  s += "  bbase = " + glsl::broadcast_offset(g.b_batch, g.out_batch, "q") + " * " +
       ulit(g.k * g.n) + ";\n";
  // Scaled operands: their exponents from the partial maxima, reduced in Cs (free until the
  // stores).
  if (mag_a || mag_b) {
    s += coop_staged_exponents(threads, mag_a ? mag_a->count : 0, mag_b ? mag_b->count : 0, "Cs");
    s += "  sA = exp2(float(ea));\n  sB = exp2(float(eb));\n";
  }
  const int wcols = t.bn / t.wn;
  s += "  uint wm0 = (sg / " + ulit(wcols) + ") * " + ulit(t.wm) + ", wn0 = (sg % " + ulit(wcols) +
       ") * " + ulit(t.wn) + ";\n";
  // Fragments are named variables, every loop over them unrolled here: arrays of cooperative
  // matrices indexed in loops may be placed in local memory by a driver's compiler.
  auto acc = [](int i, int j) { return "acc" + std::to_string(i) + "_" + std::to_string(j); };
  for (int i = 0; i < fm; ++i) {
    for (int j = 0; j < fn; ++j) s += "  F32 " + acc(i, j) + " = F32(0.0);\n";
  }
  s += "  uvec4 ra[" + std::to_string(ua) + "], rb[" + std::to_string(ub) + "];\n";

  // Global coordinates of unit u of a slab at step k0.
  const int upr_a = sa.cols / 8, upr_b = sb.cols / 8;
  auto fetch = [&](const std::string& k0) {
    std::string f;
    for (int e2 = 0; e2 < ua; ++e2) {
      const std::string u = "(lid + " + ulit(e2 * static_cast<int>(threads)) + ")";
      const std::string r = u + " / " + ulit(upr_a), c = (u + " % " + ulit(upr_a)) + " * 8u";
      f += "    ra[" + std::to_string(e2) + "] = ldA(" +
           (g.ta ? k0 + " + " + r + ", row0 + " + c : "row0 + " + r + ", " + k0 + " + " + c) +
           ");\n";
    }
    for (int e2 = 0; e2 < ub; ++e2) {
      const std::string u = "(lid + " + ulit(e2 * static_cast<int>(threads)) + ")";
      const std::string r = u + " / " + ulit(upr_b), c = (u + " % " + ulit(upr_b)) + " * 8u";
      f += "    rb[" + std::to_string(e2) + "] = ldB(" +
           (g.tb ? "col0 + " + r + ", " + k0 + " + " + c : k0 + " + " + r + ", col0 + " + c) +
           ");\n";
    }
    return f;
  };
  auto stash = [&](const std::string& stage) {
    std::string f;
    for (int e2 = 0; e2 < ua; ++e2) {
      const std::string u = "(lid + " + ulit(e2 * static_cast<int>(threads)) + ")";
      f += "    S[" + stage + " * " + ulit(stage_units) + " + (" + u + " / " + ulit(upr_a) +
           ") * " + ulit(sa.stride_units()) + " + " + u + " % " + ulit(upr_a) + "] = ra[" +
           std::to_string(e2) + "];\n";
    }
    for (int e2 = 0; e2 < ub; ++e2) {
      const std::string u = "(lid + " + ulit(e2 * static_cast<int>(threads)) + ")";
      f += "    S[" + stage + " * " + ulit(stage_units) + " + " + ulit(sa.units()) + " + (" + u +
           " / " + ulit(upr_b) + ") * " + ulit(sb.stride_units()) + " + " + u + " % " +
           ulit(upr_b) + "] = rb[" + std::to_string(e2) + "];\n";
    }
    return f;
  };

  const int64_t steps = (g.k + t.bk - 1) / t.bk;
  s += "  {\n" + fetch("0u") + stash("0u") + "  }\n  barrier();\n";
  s += "  for (uint st = 0u; st < " + ulit(steps) + "; ++st) {\n";
  s += "    uint cur = " + std::string(o.stages == 2 ? "st & 1u" : "0u") + ";\n";
  s += "    bool more = st + 1u < " + ulit(steps) + ";\n";
  s += "    if (more) {\n  uint k1 = (st + 1u) * " + ulit(t.bk) + ";\n" + fetch("k1") + "    }\n";
  s += "    uint abuf = cur * " + ulit(stage_units) + ", bbuf = abuf + " + ulit(sa.units()) + ";\n";
  s += coop_subgroup_products(t, g.ta, g.tb, sa.stride_units(), sb.stride_units(), 8);
  if (o.stages == 2) {
    s += "    if (more) {\n      uint nxt = cur ^ 1u;\n" + stash("nxt") + "    }\n    barrier();\n";
  } else {
    s += "    barrier();\n    if (more) {\n" + stash("0u") + "    }\n    barrier();\n";
  }
  s += "  }\n";

  // Store: one fragment at a time through the subgroup's scratch.
  const std::string M = ulit(g.m), N = ulit(g.n);
  s += "  uint cbase = bz * " + ulit(g.m * g.n) + ", scr = sg * 256u;\n";
  s += "  uint r = lane >> 1, c0 = (lane & 1u) * 8u;\n";
  // Packed operands were scaled by 2^e (their exponent stored after the data): undo it.
  auto exponent = [&](const std::string& name, int i, bool packed, bool vec) -> std::string {
    if (name == "A" && mag_a) return "ea";
    if (name == "B" && mag_b) return "eb";
    if (!packed) return "0";
    const uint64_t at = padded_halves(ctx.inputs[static_cast<size_t>(i)].numel());
    if (vec) return "int(" + name + "8[" + ulit(static_cast<int64_t>(at / 8)) + "].x)";
    return "int(" + name + "_ldb(" + ulit(static_cast<int64_t>(at)) + ") | (" + name + "_ldb(" +
           ulit(static_cast<int64_t>(at + 1)) + ") << 16))";
  };
  s += "  float sa = exp2(-float(" + exponent("A", 0, pack_a, vec_a) + ")), sb = exp2(-float(" +
       exponent("B", 1, pack_b, vec_b) + "));\n";
  for (int i = 0; i < fm; ++i) {
    for (int j = 0; j < fn; ++j) {
      s += "  {\n    coopMatStoreNV(" + acc(i, j) + ", Cs, scr, 16u, false);\n";
      s += "    subgroupBarrier();\n";
      s += "    uint gm = row0 + wm0 + " + ulit(i * 16) + " + r, gn = col0 + wn0 + " +
           ulit(j * 16) + " + c0;\n";
      s += "    if (gm < " + M + ") for (uint e = 0u; e < 8u; ++e) {\n";
      s += "      if (gn + e < " + N + ") C_st(cbase + gm * " + N +
           " + gn + e, mm_epilogue(Cs[scr + r * 16u + c0 + e] * sa * sb, bz, gm, gn + e));\n";
      s += "    }\n    subgroupBarrier();\n  }\n";
    }
  }
  s += "}\n";

  KernelLaunch k;
  k.name = std::string("matmul_coop_") + t.name;
  k.glsl = std::move(s);
  k.workgroup = {threads, 1, 1};
  k.groups = {static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), 1};
  k.bindings = {{a_arg, false}, {b_arg, false}, {ArgRef::output(), true}};
  if (e) {
    for (const ArgRef& a : e->extra) k.bindings.push_back({a, false});
  }
  if (mag_a) k.bindings.push_back({mag_a->parts, false});
  if (mag_b) k.bindings.push_back({mag_b->parts, false});
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace mn::codegen
