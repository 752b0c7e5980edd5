// The implicit-GEMM skeleton. Each thread accumulates a tm×tn block (8×8 where the extents
// allow) of a C tile, the threads laid out tx × ty over it, stepping K through shared-memory
// tiles. Tiles hold up to 8192 outputs: 64×128 for wide extents, and longer on one side when the
// other is narrow (256×16 for a conv with 16 output channels), so narrow convolutions keep the
// full block per thread. Large blocks matter most where shared-memory reads are dear: lavapipe
// spends ~100 instructions per component read, so 8×8 (16 reads per 64 FMAs) takes a third
// fewer instructions than 4×4 there. Operand tiles are loaded with consecutive threads on the
// operand's contiguous axis, so the loads coalesce; a thread's adjacent rows (columns) sit in vec4s
// of the shared tile and are read as vectors per K step.
#include "codegen/lower_conv_gemm.h"
#include "codegen/lower_conv_gemm_coop.h"
#include "codegen/lower_conv_gemm_staged.h"

#include <algorithm>

#include <meganeura/error.h>

#include "codegen/glsl.h"

namespace mn::codegen {

namespace {

// Outputs per tile at most (64 per thread over 128 threads), tile sides at most, and the block
// one thread accumulates at most along each side.
constexpr int64_t max_tile_area = 8192, max_tile_m = 256, max_tile_n = 128, max_per_thread = 8;
constexpr int64_t tile_k = 16;
// Workgroups a launch should offer before K is worth splitting (a few per compute unit on large
// GPUs; lavapipe saturates far below it).
constexpr int64_t target_groups = 128;
// The least K a split keeps, so the partial sums stay cheap next to the GEMM itself.
constexpr int64_t min_split_k = 256;

using glsl::ulit;
std::string n(int64_t v) { return std::to_string(v); }

std::string vec_type(int64_t w) { return w == 1 ? "float" : "vec" + std::to_string(w); }

int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// One side (M or N) of the tiling: `per` rows (columns) per thread, `threads` threads along it,
// held in vectors of `width` (per = width · vectors).
struct Side {
  int64_t per = 1, threads = 1;
  int64_t tile() const { return per * threads; }
  int64_t width() const { return std::min<int64_t>(per, 4); }
  int64_t vectors() const { return per / width(); }
};

struct Tiling {
  Side m, n;
  int64_t kt = tile_k;
  int64_t threads() const { return m.threads * n.threads; }
};

// A tile side for an extent: the extent itself (rounded up to a multiple of 8) when it fits the
// limit, so a 144-wide extent takes one 144-wide tile; otherwise the widest power of two within
// the limit whose padding past the extent stays under an eighth.
int64_t tile_side(int64_t extent, int64_t limit) {
  if (extent < 8) return pow2_at_least(extent);
  if (extent <= limit) return (extent + 7) / 8 * 8;
  int64_t t = 8;
  while (t * 2 <= limit) t *= 2;
  const auto padded = [&](int64_t side) { return (extent + side - 1) / side * side; };
  while (t > 16 && padded(t) * 8 > extent * 9) t /= 2;
  return t;
}

Tiling choose_tiling(const ImplicitGemm& spec, const DeviceTraits& d) {
  int64_t tile_n = tile_side(spec.n, max_tile_n);
  const int64_t tile_m = tile_side(spec.m, std::min(max_tile_area / tile_n, max_tile_m));
  // A short M leaves room to widen N again.
  tile_n = tile_side(spec.n, std::min(max_tile_area / tile_m, max_tile_m));
  int64_t tm = std::min(max_per_thread, tile_m), tn = std::min(max_per_thread, tile_n);
  // Small tiles spread over fewer outputs per thread until the workgroup fills two subgroups (64
  // threads on most GPUs; 16 on lavapipe, where fewer, fuller threads are cheaper).
  const auto min_threads = static_cast<int64_t>(2 * std::max(d.subgroup_size, 8u));
  while ((tile_m / tm) * (tile_n / tn) < min_threads && (tm > 1 || tn > 1)) {
    if (tm >= tn) {
      tm /= 2;
    } else {
      tn /= 2;
    }
  }
  Tiling t;
  t.m = {tm, tile_m / tm};
  t.n = {tn, tile_n / tn};
  t.kt = std::min(tile_k, spec.k);
  const auto shared_bytes = [&](int64_t kt) {
    return static_cast<uint64_t>(kt * (t.m.tile() + t.m.width() + t.n.tile() + t.n.width()) * 4);
  };
  while (t.kt > 4 && shared_bytes(t.kt) > d.max_shared_bytes) t.kt /= 2;
  if (shared_bytes(t.kt) > d.max_shared_bytes) {
    throw Error(spec.name + ": a " + n(t.m.tile()) + "x" + n(t.n.tile()) +
                " tile needs more shared memory than the device's " + n(d.max_shared_bytes) +
                " bytes");
  }
  return t;
}

// Statements filling `tile` (kt rows of `side`'s tile, as vectors) for the K block at k0:
// `read` is the element expression in terms of `gx` (the M or N index) and `gk`. Each thread
// fills whole vectors (one shared-memory store each).
std::string load_tile(const std::string& tile, const Side& side, int64_t kt, int64_t threads,
                      int64_t extent, bool k_fast, const std::string& x0, const std::string& read) {
  const int64_t w = side.width(), units = side.tile() / w;
  const int64_t count = units * kt;
  const int64_t iters = (count + threads - 1) / threads;
  std::string s = "    for (uint e = 0u; e < " + ulit(iters) + "; ++e) {\n";
  // With the fast axis dividing the thread count, each thread keeps one fast index for the whole
  // kernel; spelling it from lid alone lets the compiler see it is loop-invariant.
  if (!k_fast && threads % units == 0) {
    s += "      uint vv = lid % " + ulit(units) + ", kk = lid / " + ulit(units) + " + e * " +
         ulit(threads / units) + ";\n";
  } else if (k_fast && threads % kt == 0) {
    s += "      uint kk = lid % " + ulit(kt) + ", vv = lid / " + ulit(kt) + " + e * " +
         ulit(threads / kt) + ";\n";
  } else {
    s += "      uint idx = lid + e * " + ulit(threads) + ";\n";
    s += k_fast ? "      uint kk = idx % " + ulit(kt) + ", vv = idx / " + ulit(kt) + ";\n"
                : "      uint vv = idx % " + ulit(units) + ", kk = idx / " + ulit(units) + ";\n";
  }
  const bool exact = count % threads == 0;
  s += std::string("      ") +
       (exact ? "" : "if (kk < " + ulit(kt) + " && vv < " + ulit(units) + ") ") + "{\n";
  // Out-of-range elements read a clamped in-range one and are zeroed after: straight-line code
  // with a select (lavapipe runs branches under masks, so skipping the load saves nothing).
  s += "        uint gk = k0 + kk;\n        bool kin = gk < kend;\n        gk = min(gk, kend - "
       "1u);\n";
  s += "        " + vec_type(w) + " t;\n";
  for (int64_t c = 0; c < w; ++c) {
    const std::string comp = w == 1 ? "t" : "t[" + n(c) + "]";
    s += "        {\n          uint gx = " + x0 + " + vv * " + ulit(w) + " + " + ulit(c) + ";\n";
    s += "          bool inside = kin && gx < " + ulit(extent) + ";\n";
    s += "          gx = min(gx, " + ulit(extent - 1) + ");\n";
    s += "          float v = " + read + ";\n";
    s += "          " + comp + " = inside ? v : 0.0;\n        }\n";
  }
  s += "        " + tile + "[kk][vv] = t;\n";
  s += "      }\n    }\n";
  return s;
}

// Statements declaring `<name>0..` (the thread's operand vectors at step kk) from the shared tile.
std::string operand_values(const std::string& name, const std::string& tile, const Side& side,
                           const std::string& thread) {
  const std::string type = "      " + vec_type(side.width()) + " " + name;
  const std::string row = " = " + tile + "[kk][" + thread + " * " + ulit(side.vectors()) + " + ";
  std::string s;
  for (int64_t q = 0; q < side.vectors(); ++q)
    s.append(type).append(n(q)).append(row).append(ulit(q)).append("];\n");
  return s;
}

// Element i of a side's values (a component of one of its vectors).
std::string element(const std::string& name, const Side& side, int64_t i) {
  if (side.width() == 1) return name + n(i);
  return name + n(i / side.width()) + "[" + n(i % side.width()) + "]";
}

void check_grid(const std::string& name, const std::array<uint64_t, 3>& wanted,
                const DeviceTraits& d) {
  for (uint64_t w : wanted) {
    if (w > d.max_group_count) {
      throw Error(name + ": grid " + std::to_string(wanted[0]) + "x" + std::to_string(wanted[1]) +
                  "x" + std::to_string(wanted[2]) + " exceeds the device's limit of " +
                  n(d.max_group_count) + " groups per dimension");
    }
  }
}

}  // namespace

Lowering lower_implicit_gemm(const ImplicitGemm& spec, const DeviceTraits& device) {
  // The staged kernel everywhere it runs when asked (MN_CONV_STAGED=1); else the packed one,
  // then the staged one for the GEMMs measured faster on it than on the portable kernel.
  if (device.conv_staged) {
    if (auto staged = lower_implicit_gemm_staged(spec, device)) return std::move(*staged);
  }
  if (auto coop = lower_implicit_gemm_coop(spec, device)) return std::move(*coop);
  if (spec.staged_when_unpacked && device.conv_coop) {
    if (auto staged = lower_implicit_gemm_staged(spec, device)) return std::move(*staged);
  }
  const Tiling t = choose_tiling(spec, device);
  const int64_t tile_m = t.m.tile(), tile_n = t.n.tile(), kt = t.kt;
  const int64_t tiles_m = (spec.m + tile_m - 1) / tile_m, tiles_n = (spec.n + tile_n - 1) / tile_n;
  const int64_t base_groups = tiles_m * tiles_n * spec.groups;

  // Split K only while the tiles leave the device idle and each split keeps a real share of K.
  int64_t splits = 1;
  if (spec.split_k && base_groups < target_groups) {
    splits = std::min((target_groups + base_groups - 1) / base_groups, spec.k / min_split_k);
    splits = std::max<int64_t>(splits, 1);
  }
  int64_t k_split = (spec.k + splits - 1) / splits;
  k_split = (k_split + kt - 1) / kt * kt;
  splits = (spec.k + k_split - 1) / k_split;

  // The M×N tiles fold into a 2-D grid past the device's group-count limit.
  const int64_t tiles = tiles_m * tiles_n;
  const int64_t grid_x = std::min<int64_t>(tiles, device.max_group_count);
  const int64_t grid_y = (tiles + grid_x - 1) / grid_x;

  const int scratch_binding = static_cast<int>(spec.bindings.size());
  const std::string mnk = ulit(spec.m * spec.n * spec.groups);
  std::string common = glsl::header() + spec.declarations;
  if (splits > 1) common += glsl::buffer(scratch_binding, DType::f32, "P", false);
  common += implicit_gemm_functions(spec);

  std::string s = common;
  for (const auto& [name, side] : {std::pair{"As", &t.m}, std::pair{"Bs", &t.n}}) {
    s += std::string("shared ") + vec_type(side->width()) + " " + name + "[" + n(kt) + "][" +
         n(side->tile() / side->width() + 1) + "];\n";
  }
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x;\n";
  // The thread's position along M and N: the fast thread index follows C's contiguous axis so
  // the epilogue's stores coalesce.
  if (spec.c_n_fast) {
    s += "  uint rm = lid / " + ulit(t.n.threads) + ", rn = lid % " + ulit(t.n.threads) + ";\n";
  } else {
    s += "  uint rm = lid % " + ulit(t.m.threads) + ", rn = lid / " + ulit(t.m.threads) + ";\n";
  }
  s += "  uint tile = gl_WorkGroupID.y * " + ulit(grid_x) + " + gl_WorkGroupID.x;\n";
  s += "  if (tile >= " + ulit(tiles) + ") return;\n";
  s += "  uint row0 = tile / " + ulit(tiles_n) + " * " + ulit(tile_m) + ", col0 = tile % " +
       ulit(tiles_n) + " * " + ulit(tile_n) + ";\n";
  s += "  uint g = gl_WorkGroupID.z % " + ulit(spec.groups) + ", s = gl_WorkGroupID.z / " +
       ulit(spec.groups) + ";\n";
  s += "  uint kbeg = s * " + ulit(k_split) + ", kend = min(kbeg + " + ulit(k_split) + ", " +
       ulit(spec.k) + ");\n";
  const int64_t nb = t.n.vectors();
  const std::string acc_type = vec_type(t.n.width());
  s += "  " + acc_type + " acc[" + n(t.m.per * nb) + "];\n";
  for (int64_t i = 0; i < t.m.per * nb; ++i) s += "  acc[" + n(i) + "] = " + acc_type + "(0.0);\n";
  s += "  for (uint k0 = kbeg; k0 < kend; k0 += " + ulit(kt) + ") {\n";
  s += load_tile("As", t.m, kt, t.threads(), spec.m, spec.a_k_fast, "row0", "a_at(g, gx, gk)");
  s += load_tile("Bs", t.n, kt, t.threads(), spec.n, spec.b_k_fast, "col0", "b_at(g, gk, gx)");
  s += "    barrier();\n";
  s += "    for (uint kk = 0u; kk < " + ulit(kt) + "; ++kk) {\n";
  s += operand_values("a", "As", t.m, "rm");
  s += operand_values("b", "Bs", t.n, "rn");
  for (int64_t i = 0; i < t.m.per; ++i) {
    for (int64_t q = 0; q < nb; ++q) {
      s += "      acc[" + n(i * nb + q) + "] += " + element("a", t.m, i) + " * b" + n(q) + ";\n";
    }
  }
  s += "    }\n    barrier();\n  }\n";
  // acc[i * nb + q] holds row rm·tm + i, columns rn·tn + q·width + c. Spelled out with constant
  // indices so the accumulators stay in registers.
  const int64_t bw = t.n.width();
  for (int64_t i = 0; i < t.m.per; ++i) {
    for (int64_t j = 0; j < t.n.per; ++j) {
      s += "  {\n    uint gm = row0 + rm * " + ulit(t.m.per) + " + " + ulit(i) +
           ", gn = col0 + rn * " + ulit(t.n.per) + " + " + ulit(j) + ";\n";
      s += "    float v = acc[" + n(i * nb + j / bw) + "]" + (bw > 1 ? "[" + n(j % bw) + "]" : "") +
           ";\n";
      s += "    if (gm < " + ulit(spec.m) + " && gn < " + ulit(spec.n) + ") ";
      if (splits > 1) {
        s += "P_st(s * " + mnk + " + (g * " + ulit(spec.m) + " + gm) * " + ulit(spec.n) +
             " + gn, v);\n";
      } else {
        s += "c_store(g, gm, gn, v);\n";
      }
      s += "  }\n";
    }
  }
  s += "}\n";

  KernelLaunch main;
  main.name = spec.name + "_gemm_" + n(tile_m) + "x" + n(tile_n) + (splits > 1 ? "_splitk" : "");
  main.glsl = std::move(s);
  main.workgroup = {static_cast<uint32_t>(t.threads()), 1, 1};
  const std::array<uint64_t, 3> wanted{static_cast<uint64_t>(grid_x), static_cast<uint64_t>(grid_y),
                                       static_cast<uint64_t>(spec.groups * splits)};
  check_grid(spec.name, wanted, device);
  main.groups = {static_cast<uint32_t>(wanted[0]), static_cast<uint32_t>(wanted[1]),
                 static_cast<uint32_t>(wanted[2])};
  main.bindings = spec.bindings;

  Lowering l;
  if (splits == 1) {
    l.launches.push_back(std::move(main));
    return l;
  }
  // The split kernel writes only its partial tiles; the finishing pass sums them in split order
  // (deterministic) and runs the epilogue.
  for (KernelBinding& b : main.bindings) {
    if (b.arg.kind == ArgRef::Kind::output) b.written = false;
  }
  main.bindings.push_back({ArgRef::scratch(0), true});
  l.scratch_bytes.push_back(static_cast<uint64_t>(splits * spec.m * spec.n * spec.groups) * 4);
  l.launches.push_back(std::move(main));
  l.launches.push_back(implicit_gemm_split_sum(spec, splits, ArgRef::scratch(0), device));
  return l;
}

std::string implicit_gemm_functions(const ImplicitGemm& spec) {
  return "float a_at(uint g, uint m, uint k) {\n" + spec.a_at + "}\n" +
         "float b_at(uint g, uint k, uint n) {\n" + spec.b_at + "}\n" +
         "void c_store(uint g, uint m, uint n, float v) {\n" + spec.c_store + "}\n";
}

KernelLaunch implicit_gemm_split_sum(const ImplicitGemm& spec, int64_t splits, ArgRef partials,
                                     const DeviceTraits& device) {
  const std::string mnk = ulit(spec.m * spec.n * spec.groups);
  const auto total = static_cast<uint64_t>(spec.m * spec.n * spec.groups);
  const glsl::Linear grid = glsl::linear_grid(total, device);
  std::string body;
  body += "  float v = 0.0;\n";
  body += "  for (uint s = 0u; s < " + ulit(splits) + "; ++s) v += P_ld(s * " + mnk + " + i);\n";
  body += "  uint g = i / " + ulit(spec.m * spec.n) + ", r = i % " + ulit(spec.m * spec.n) + ";\n";
  body += "  c_store(g, r / " + ulit(spec.n) + ", r % " + ulit(spec.n) + ", v);\n";
  KernelLaunch finish;
  finish.name = spec.name + "_splitk_sum";
  finish.glsl =
      glsl::header() + spec.declarations +
      glsl::buffer(static_cast<uint32_t>(spec.bindings.size()), DType::f32, "P", false) +
      implicit_gemm_functions(spec) + glsl::gid_function() +
      "void main() {\n  uint i = gid();\n  if (i >= " + ulit(static_cast<int64_t>(total)) +
      ") return;\n" + body + "}\n";
  finish.workgroup = {grid.local, 1, 1};
  finish.groups = grid.groups;
  finish.bindings = spec.bindings;
  finish.bindings.push_back({partials, false});
  return finish;
}

}  // namespace mn::codegen
