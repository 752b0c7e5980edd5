// Implicit GEMM on subgroup-scope tensor cores, operands staged through shared memory.
//
// Launches: the largest magnitude of A's values and of B's (codegen/lower_matmul_coop.h's
// absmax, over the buffer each operand reads where the spec names one); the product; with K
// split, the sum of the partial products (codegen/lower_conv_gemm.h).
//
// The product: a workgroup computes a bm×bn tile of C (the subgroup tiles of
// codegen/lower_matmul_coop.h), each subgroup a wm×wn block of 16×16 f32 accumulators. Every
// K step of bk the threads evaluate a_at and b_at over the step's slabs, two neighbouring
// elements at a time along the operand's contiguous axis (so a subgroup's loads cover a few
// whole sectors), multiply them by 2^e (e from the operand's largest magnitude, as the packed
// operands are scaled), round them to f16 and store the pair as one 32-bit word. Slabs keep
// their operand's memory order: a slab whose M (or N) is contiguous is read column-major by
// the fragment loads. The next step's values are fetched into registers before the current
// step's products, and with two shared stages one barrier per step suffices. Results leave
// through a per-subgroup 16×16 scratch in shared memory, walked along C's contiguous axis.
#include "codegen/lower_conv_gemm_staged.h"

#include <algorithm>
#include <limits>
#include <string>

#include "codegen/glsl.h"
#include "codegen/lower_conv_gemm_coop.h"
#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

// Each split keeps at least this much of K.
constexpr int64_t kMinSplitK = 256;
// A tile side below 16 would leave most of a fragment idle.
constexpr int64_t kMinExtent = 16;

// A slab as staged: rows × cols halves, cols contiguous, in 32-bit words of two halves. Rows
// are padded by 4 words (16 bytes), which puts the 16-byte row segments one fragment load
// touches into distinct banks.
struct Slab {
  int rows = 0, cols = 0;
  int stride() const { return cols / 2 + 4; }
  int words() const { return rows * stride(); }
  int pairs() const { return rows * cols / 2; }
};

// The operands' slabs for tile t: A's is K×M (M contiguous) unless K is A's fast axis, B's
// N×K (K contiguous) when K is B's fast axis.
struct Slabs {
  bool ta = false, tb = false;
  Slab a, b;
  int stage_words() const { return a.words() + b.words(); }
};

Slabs slabs_for(const CoopTile& t, const ImplicitGemm& spec) {
  Slabs s;
  s.ta = !spec.a_k_fast;
  s.tb = spec.b_k_fast;
  s.a = s.ta ? Slab{t.bk, t.bm} : Slab{t.bm, t.bk};
  s.b = s.tb ? Slab{t.bn, t.bk} : Slab{t.bk, t.bn};
  return s;
}

uint32_t shared_bytes(const CoopTile& t, const Slabs& s, int stages) {
  return static_cast<uint32_t>(stages * s.stage_words() * 4 + t.subgroups() * 256 * 4);
}

bool tile_usable(size_t i, const CoopTile& t, const ImplicitGemm& spec, const DeviceTraits& d) {
  if (!(d.coop_tiles >> i & 1u)) return false;
  const auto threads = static_cast<uint32_t>(t.subgroups()) * 32u;
  if (threads > d.max_workgroup_invocations) return false;
  const Slabs s = slabs_for(t, spec);
  if (s.a.pairs() % static_cast<int>(threads) || s.b.pairs() % static_cast<int>(threads)) {
    return false;
  }
  return shared_bytes(t, s, 1) <= d.max_shared_bytes;
}

// The largest usable tile whose grid fills the device, else the smallest usable one.
const CoopTile* choose_tile(const ImplicitGemm& spec, const DeviceTraits& d) {
  const CoopTile* best = nullptr;
  const auto tiles = coop_tiles();
  for (size_t i = 0; i < tiles.size(); ++i) {
    const CoopTile& t = tiles[i];
    if (!tile_usable(i, t, spec, d)) continue;
    const int64_t groups =
        ((spec.m + t.bm - 1) / t.bm) * ((spec.n + t.bn - 1) / t.bn) * spec.groups;
    if (!best || groups >= d.groups_to_fill()) best = &t;
  }
  return best;
}

// The kernel's shape: tile, staging and K splits.
struct Plan {
  const CoopTile* tile = nullptr;
  Slabs slabs;
  int stages = 1;
  uint32_t threads = 0;
  int64_t row_tiles = 0, col_tiles = 0, splits = 1, k_split = 0;
  int64_t workgroups() const { return row_tiles * col_tiles * splits; }
};

Plan plan_for(const CoopTile& t, const ImplicitGemm& spec, const DeviceTraits& d) {
  Plan p;
  p.tile = &t;
  p.slabs = slabs_for(t, spec);
  p.stages = shared_bytes(t, p.slabs, 2) <= d.max_shared_bytes ? 2 : 1;
  p.threads = static_cast<uint32_t>(t.subgroups()) * 32u;
  p.row_tiles = (spec.m + t.bm - 1) / t.bm;
  p.col_tiles = (spec.n + t.bn - 1) / t.bn;
  // Where the tiles leave multiprocessors idle, K is split into about two workgroups per
  // multiprocessor, each split keeping a real share of K.
  const int64_t base = p.row_tiles * p.col_tiles * spec.groups, fill = d.groups_to_fill();
  if (base < fill) {
    p.splits = std::clamp<int64_t>((2 * fill + base - 1) / base, 1,
                                   std::max<int64_t>(1, spec.k / kMinSplitK));
  }
  p.k_split = ((spec.k + p.splits - 1) / p.splits + t.bk - 1) / t.bk * t.bk;
  p.splits = (spec.k + p.k_split - 1) / p.k_split;
  return p;
}

// Statements evaluating one operand's share of the slab at K offset `k0` into `regs`: pair
// j of a thread is slab word lid + j·threads, two neighbouring elements of one slab row.
// `call` is the operand's function of (M or N index, K index); the slab's rows are K when
// `k_rows`, its M or N index (from `x0`, below `extent`) otherwise; values are multiplied by
// `scale` before rounding to f16.
std::string fetch(const char* regs, const Slab& slab, uint32_t threads, const std::string& call,
                  bool k_rows, const std::string& x0, int64_t extent, const std::string& k0,
                  const char* scale) {
  const int pairs_per_row = slab.cols / 2;
  const int per_thread = slab.pairs() / static_cast<int>(threads);
  std::string s;
  for (int j = 0; j < per_thread; ++j) {
    const std::string p = "(lid + " + ulit(static_cast<int64_t>(j) * threads) + ")";
    const std::string r = p + " / " + ulit(pairs_per_row),
                      c = "(" + p + " % " + ulit(pairs_per_row) + ") * 2u";
    // Slab rows are K (cols the M or N index) when k_rows, else the other way round.
    const std::string x = k_rows ? x0 + " + " + c : x0 + " + " + r;
    const std::string k = k_rows ? k0 + " + " + r : k0 + " + " + c;
    const std::string x1 = k_rows ? "x + 1u" : "x", k1 = k_rows ? "k" : "k + 1u";
    s += "    {\n      uint x = " + x + ", k = " + k + ";\n";
    s += "      float v0 = 0.0, v1 = 0.0;\n";
    s += "      if (x < " + ulit(extent) + " && k < kend) v0 = " + call + "(x, k);\n";
    s += "      if (" + x1 + " < " + ulit(extent) + " && " + k1 + " < kend) v1 = " + call + "(" +
         x1 + ", " + k1 + ");\n";
    s += "      " + std::string(regs) + "[" + std::to_string(j) +
         "] = packHalf2x16(vec2(v0, v1) * " + scale + ");\n    }\n";
  }
  return s;
}

// Statements storing `regs` into the slab at word offset `base`.
std::string stash(const char* regs, const Slab& slab, uint32_t threads, const std::string& base) {
  const int pairs_per_row = slab.cols / 2;
  const int per_thread = slab.pairs() / static_cast<int>(threads);
  std::string s;
  for (int j = 0; j < per_thread; ++j) {
    const std::string p = "(lid + " + ulit(static_cast<int64_t>(j) * threads) + ")";
    s += "    S[" + base + " + (" + p + " / " + ulit(pairs_per_row) + ") * " + ulit(slab.stride()) +
         " + " + p + " % " + ulit(pairs_per_row) + "] = " + regs + "[" + std::to_string(j) + "];\n";
  }
  return s;
}

// The stores: each fragment through the subgroup's scratch, lanes along C's contiguous axis
// (N for the split partials, which are row-major).
std::string stores(const Plan& p, const ImplicitGemm& spec) {
  const CoopTile& t = *p.tile;
  const bool n_fast = spec.c_n_fast || p.splits > 1;
  const std::string M = ulit(spec.m), N = ulit(spec.n);
  std::string s = "  uint scr = sg * 256u;\n";
  s += n_fast ? "  uint r = lane >> 1, c0 = (lane & 1u) * 8u;\n"
              : "  uint r = lane & 15u, c0 = (lane >> 4) * 8u;\n";
  const std::string at = n_fast ? "r * 16u + c0 + e" : "(c0 + e) * 16u + r";
  const std::string put = p.splits > 1 ? "P_st(((s * " + ulit(spec.groups) + " + g) * " + M +
                                             " + gm) * " + N + " + gn, v);\n"
                                       : "c_store(g, gm, gn, v);\n";
  for (int i = 0; i < t.wm / 16; ++i) {
    for (int j = 0; j < t.wn / 16; ++j) {
      s += "  {\n    coopMatStoreNV(acc" + std::to_string(i) + "_" + std::to_string(j) +
           ", Cs, scr, 16u, " + (n_fast ? "false" : "true") + ");\n";
      s += "    subgroupBarrier();\n";
      s += "    for (uint e = 0u; e < 8u; ++e) {\n";
      s += "      uint gm = row0 + wm0 + " + ulit(i * 16) + " + r, gn = col0 + wn0 + " +
           ulit(j * 16) + " + c0 + e;\n";
      s += "      if (gm < " + M + " && gn < " + N + ") {\n        float v = Cs[scr + " + at +
           "] * unscale;\n        " + put + "      }\n    }\n    subgroupBarrier();\n  }\n";
    }
  }
  return s;
}

std::string kernel(const Plan& p, const ImplicitGemm& spec, uint64_t parts_a, uint64_t parts_b) {
  const CoopTile& t = *p.tile;
  const auto nb = static_cast<uint32_t>(spec.bindings.size());
  const int64_t tiles = p.row_tiles * p.col_tiles;
  std::string s =
      "#version 450\n"
      "#extension GL_EXT_shader_16bit_storage : require\n"
      "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
      "#extension GL_KHR_memory_scope_semantics : require\n"
      "#extension GL_NV_cooperative_matrix : require\n"
      "#extension GL_KHR_shader_subgroup_basic : require\n"
      "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n";
  s += spec.declarations;
  s += "layout(std430, set = 0, binding = " + std::to_string(nb) +
       ") readonly buffer BufferPA { float PA[]; };\n";
  s += "layout(std430, set = 0, binding = " + std::to_string(nb + 1) +
       ") readonly buffer BufferPB { float PB[]; };\n";
  if (p.splits > 1) s += glsl::buffer(nb + 2, DType::f32, "P", false);
  s += implicit_gemm_functions(spec) + coop_scale_exponent_function();
  s += "shared uint S[" + std::to_string(p.stages * p.slabs.stage_words()) + "];\n";
  s += "shared float Cs[" + std::to_string(t.subgroups() * 256) + "];\n";
  s += "#define F16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>\n";
  s += "#define F32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>\n";
  // The operand functions as the fetches call them: (M or N index, K index), group g bound.
  s += "#define a_at_(x, k) a_at(g, x, k)\n#define b_at_(x, k) b_at(g, k, x)\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;\n";
  s += "  uint wid = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;\n";
  s += "  if (wid >= " + ulit(p.workgroups() * spec.groups) + ") return;\n";
  // The operands' scales from their partial maxima (Cs is free until the stores).
  s += coop_staged_exponents(p.threads, parts_a, parts_b, "Cs");
  s += "  float sa = exp2(float(ea)), sb = exp2(float(eb)), unscale = exp2(-float(ea + eb));\n";
  s += "  uint z = wid / " + ulit(tiles) + ", tid = wid % " + ulit(tiles) + ";\n";
  s += "  uint g = z / " + ulit(p.splits) + ", s = z % " + ulit(p.splits) + ";\n";
  s += coop_tile_origin(8, p.row_tiles, p.col_tiles, t.bm, t.bn);
  s += "  uint kbeg = s * " + ulit(p.k_split) + ", kend = min(kbeg + " + ulit(p.k_split) + ", " +
       ulit(spec.k) + ");\n";
  const int wcols = t.bn / t.wn;
  s += "  uint wm0 = (sg / " + ulit(wcols) + ") * " + ulit(t.wm) + ", wn0 = (sg % " + ulit(wcols) +
       ") * " + ulit(t.wn) + ";\n";
  // Fragments are named variables (arrays of cooperative matrices may land in local memory).
  for (int i = 0; i < t.wm / 16; ++i) {
    for (int j = 0; j < t.wn / 16; ++j) {
      s += "  F32 acc" + std::to_string(i) + "_" + std::to_string(j) + " = F32(0.0);\n";
    }
  }
  const Slab& sa = p.slabs.a;
  const Slab& sb = p.slabs.b;
  s += "  uint ra[" + std::to_string(sa.pairs() / static_cast<int>(p.threads)) + "], rb[" +
       std::to_string(sb.pairs() / static_cast<int>(p.threads)) + "];\n";
  auto fetch_both = [&](const std::string& k0) {
    return fetch("ra", sa, p.threads, "a_at_", p.slabs.ta, "row0", spec.m, k0, "sa") +
           fetch("rb", sb, p.threads, "b_at_", !p.slabs.tb, "col0", spec.n, k0, "sb");
  };
  auto stash_both = [&](const std::string& stage) {
    const std::string base = stage + " * " + ulit(p.slabs.stage_words());
    return stash("ra", sa, p.threads, base) +
           stash("rb", sb, p.threads, base + " + " + ulit(sa.words()));
  };
  s += "  {\n" + fetch_both("kbeg") + stash_both("0u") + "  }\n  barrier();\n";
  s += "  uint st = 0u;\n";
  s += "  for (uint k0 = kbeg; k0 < kend; k0 += " + ulit(t.bk) + ", ++st) {\n";
  s += "    uint cur = " + std::string(p.stages == 2 ? "st & 1u" : "0u") + ";\n";
  s += "    bool more = k0 + " + ulit(t.bk) + " < kend;\n";
  s += "    if (more) {\n    uint k1 = k0 + " + ulit(t.bk) + ";\n" + fetch_both("k1") + "    }\n";
  s += "    uint abuf = cur * " + ulit(p.slabs.stage_words()) + ", bbuf = abuf + " +
       ulit(sa.words()) + ";\n";
  s += coop_subgroup_products(t, p.slabs.ta, p.slabs.tb, p.slabs.a.stride(), p.slabs.b.stride(), 2);
  if (p.stages == 2) {
    s += "    if (more) {\n" + stash_both("(cur ^ 1u)") + "    }\n    barrier();\n";
  } else {
    s += "    barrier();\n    if (more) {\n" + stash_both("0u") + "    }\n    barrier();\n";
  }
  s += "  }\n";
  s += stores(p, spec);
  s += "}\n";
  return s;
}

}  // namespace

std::optional<Lowering> lower_implicit_gemm_staged(const ImplicitGemm& spec,
                                                   const DeviceTraits& d) {
  if (!d.coop || d.subgroup_size != 32) return std::nullopt;
  if (spec.m < kMinExtent || spec.n < kMinExtent) return std::nullopt;
  if (spec.m * spec.n * spec.k * spec.groups < kCoopMinMacs) return std::nullopt;
  const auto nb = static_cast<uint32_t>(spec.bindings.size());
  if (nb + 3 > d.max_storage_buffers) return std::nullopt;
  const CoopTile* tile = choose_tile(spec, d);
  if (!tile) return std::nullopt;
  const Plan p = plan_for(*tile, spec, d);
  // The partial products and the kernels' indices stay within 32 bits.
  const int64_t u32_max = std::numeric_limits<uint32_t>::max() - 16;
  if (p.splits * spec.groups * spec.m * spec.n > u32_max) return std::nullopt;

  Lowering l;
  int scratch = 0;
  const std::string name = spec.name + "_staged";
  // The values each operand's scale comes from: the buffer it reads, or the operand itself.
  const PackSource src_a = pack_source(spec, "a_at", spec.a_at,
                                       Packed{spec.m, spec.k, spec.m, spec.k, spec.a_k_fast, true},
                                       spec.a_source, spec.a_source_count);
  const PackSource src_b = pack_source(spec, "b_at", spec.b_at,
                                       Packed{spec.k, spec.n, spec.k, spec.n, spec.b_k_fast, false},
                                       spec.b_source, spec.b_source_count);
  const CoopMagnitude mag_a = absmax_coop_source(src_a, spec.bindings, name + "_a", l, scratch);
  const CoopMagnitude mag_b = absmax_coop_source(src_b, spec.bindings, name + "_b", l, scratch);

  KernelLaunch k;
  k.name = name + "_" + p.tile->name + (p.splits > 1 ? "_splitk" : "");
  k.glsl = kernel(p, spec, mag_a.count, mag_b.count);
  k.workgroup = {p.threads, 1, 1};
  k.groups = coop_wg_grid(p.workgroups() * spec.groups, d, spec.name.c_str());
  k.bindings = spec.bindings;
  k.bindings.push_back({mag_a.parts, false});
  k.bindings.push_back({mag_b.parts, false});
  if (p.splits == 1) {
    l.launches.push_back(std::move(k));
    return l;
  }
  // The product writes only partial tiles; the sum stores through c_store.
  for (KernelBinding& b : k.bindings) {
    if (b.arg.kind == ArgRef::Kind::output) b.written = false;
  }
  const ArgRef partials = ArgRef::scratch(scratch++);
  k.bindings.push_back({partials, true});
  l.scratch_bytes.push_back(static_cast<uint64_t>(p.splits * spec.groups * spec.m * spec.n) * 4);
  l.launches.push_back(std::move(k));
  l.launches.push_back(implicit_gemm_split_sum(spec, p.splits, partials, d));
  return l;
}

}  // namespace mn::codegen
