// The implicit-GEMM skeleton: 256 threads as 16×16, each computing tm×tn outputs of a
// 16·tm × 16·tn tile of C (4×4 per thread when an extent fills 64, fewer for small extents),
// stepping K by 16 through shared-memory tiles. Each operand tile is loaded with consecutive
// threads on the operand's contiguous axis, so the loads coalesce; the thread's fixed tile row
// and column let the compiler hoist the M/N half of the im2col index out of the K loop.
#include "codegen/lower_conv_gemm.h"

#include <algorithm>

#include <meganeura/error.h>

#include "codegen/glsl.h"

namespace mn::codegen {

namespace {

constexpr uint32_t kThreads = 256;
constexpr int64_t kTileK = 16;
// Workgroups a launch should offer before K is worth splitting (a few per compute unit on large
// GPUs; lavapipe saturates far below it).
constexpr int64_t kTargetGroups = 128;
// The least K a split keeps, so the partial sums stay cheap next to the GEMM itself.
constexpr int64_t kMinSplitK = 256;

std::string u(int64_t v) { return std::to_string(v) + "u"; }

// Per-thread tile factor for an extent: 4 once it fills a 64-wide tile, then 2, then 1.
int64_t per_thread(int64_t extent) { return extent >= 64 ? 4 : extent >= 32 ? 2 : 1; }

// Statements filling `tile[kk][xx]` (kt × width) for the K block starting at k0: `read` is the
// element expression in terms of `gx` (tile row/column index in M or N) and `gk`.
std::string load_tile(const std::string& tile, int64_t width, int64_t kt, int64_t extent,
                      bool k_fast, const std::string& x0, const std::string& read) {
  const int64_t count = width * kt;
  const int64_t iters = (count + kThreads - 1) / kThreads;
  std::string s = "    for (uint e = 0u; e < " + u(iters) + "; ++e) {\n";
  // With the fast axis dividing the thread count, each thread keeps one fast index for the whole
  // kernel; spelling it from lid alone lets the compiler see it is loop-invariant.
  if (!k_fast && kThreads % width == 0) {
    s += "      uint xx = lid % " + u(width) + ", kk = lid / " + u(width) + " + e * " +
         u(kThreads / width) + ";\n";
  } else if (k_fast && kThreads % kt == 0) {
    s += "      uint kk = lid % " + u(kt) + ", xx = lid / " + u(kt) + " + e * " + u(kThreads / kt) +
         ";\n";
  } else {
    s += "      uint idx = lid + e * " + u(kThreads) + ";\n";
    s += k_fast ? "      uint kk = idx % " + u(kt) + ", xx = idx / " + u(kt) + ";\n"
                : "      uint xx = idx % " + u(width) + ", kk = idx / " + u(width) + ";\n";
  }
  const bool exact = count % kThreads == 0;
  s += std::string("      ") + (exact ? "" : "if (kk < " + u(kt) + " && xx < " + u(width) + ") ") +
       "{\n";
  s += "        uint gx = " + x0 + " + xx, gk = k0 + kk;\n";
  s += "        " + tile + "[kk][xx] = (gx < " + u(extent) + " && gk < kend) ? " + read +
       " : 0.0;\n";
  s += "      }\n    }\n";
  return s;
}

void check_grid(const std::string& name, const std::array<uint64_t, 3>& wanted,
                const DeviceTraits& d) {
  for (size_t i = 0; i < 3; ++i) {
    if (wanted[i] > d.max_group_count) {
      throw Error(name + ": grid " + std::to_string(wanted[0]) + "x" + std::to_string(wanted[1]) +
                  "x" + std::to_string(wanted[2]) + " exceeds the device's limit of " +
                  std::to_string(d.max_group_count) + " groups per dimension");
    }
  }
}

}  // namespace

Lowering lower_implicit_gemm(const ImplicitGemm& spec, const DeviceTraits& device) {
  const int64_t tm = per_thread(spec.m), tn = per_thread(spec.n);
  const int64_t tile_m = 16 * tm, tile_n = 16 * tn;
  const int64_t kt = std::min(kTileK, spec.k);
  const int64_t tiles_m = (spec.m + tile_m - 1) / tile_m, tiles_n = (spec.n + tile_n - 1) / tile_n;
  const int64_t base_groups = tiles_m * tiles_n * spec.groups;

  // Split K only while the tiles leave the device idle and each split keeps a real share of K.
  int64_t splits = 1;
  if (spec.split_k && base_groups < kTargetGroups) {
    splits = std::min((kTargetGroups + base_groups - 1) / base_groups, spec.k / kMinSplitK);
    splits = std::max<int64_t>(splits, 1);
  }
  int64_t k_split = (spec.k + splits - 1) / splits;
  k_split = (k_split + kt - 1) / kt * kt;
  splits = (spec.k + k_split - 1) / k_split;

  const int64_t tiles = tiles_m * tiles_n;
  const int64_t grid_x = std::min<int64_t>(tiles, device.max_group_count);
  const int64_t grid_y = (tiles + grid_x - 1) / grid_x;

  const int scratch_binding = static_cast<int>(spec.bindings.size());
  const std::string mnk = u(spec.m * spec.n * spec.groups);
  std::string common = glsl::header() + spec.declarations;
  if (splits > 1) common += glsl::buffer(scratch_binding, DType::f32, "P", false);
  common += "float a_at(uint g, uint m, uint k) {\n" + spec.a_at + "}\n";
  common += "float b_at(uint g, uint k, uint n) {\n" + spec.b_at + "}\n";
  common += "void c_store(uint g, uint m, uint n, float v) {\n" + spec.c_store + "}\n";

  std::string s = common;
  s += "shared float As[" + std::to_string(kt) + "][" + std::to_string(tile_m + 1) + "];\n";
  s += "shared float Bs[" + std::to_string(kt) + "][" + std::to_string(tile_n + 1) + "];\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x;\n";
  // The epilogue's fast thread index follows C's contiguous axis so the stores coalesce.
  s += spec.c_n_fast ? "  uint rm = lid / 16u, rn = lid % 16u;\n"
                     : "  uint rm = lid % 16u, rn = lid / 16u;\n";
  // The M×N tiles fold into a 2-D grid past the device's group-count limit.
  s += "  uint tile = gl_WorkGroupID.y * " + u(grid_x) + " + gl_WorkGroupID.x;\n";
  s += "  if (tile >= " + u(tiles_m * tiles_n) + ") return;\n";
  s += "  uint row0 = tile / " + u(tiles_n) + " * " + u(tile_m) + ", col0 = tile % " + u(tiles_n) +
       " * " + u(tile_n) + ";\n";
  s += "  uint g = gl_WorkGroupID.z % " + u(spec.groups) + ", s = gl_WorkGroupID.z / " +
       u(spec.groups) + ";\n";
  s += "  uint kbeg = s * " + u(k_split) + ", kend = min(kbeg + " + u(k_split) + ", " + u(spec.k) +
       ");\n";
  s += "  float acc[" + std::to_string(tm) + "][" + std::to_string(tn) + "];\n";
  s += "  for (uint i = 0u; i < " + u(tm) + "; ++i) for (uint j = 0u; j < " + u(tn) +
       "; ++j) acc[i][j] = 0.0;\n";
  s += "  for (uint k0 = kbeg; k0 < kend; k0 += " + u(kt) + ") {\n";
  s += load_tile("As", tile_m, kt, spec.m, spec.a_k_fast, "row0", "a_at(g, gx, gk)");
  s += load_tile("Bs", tile_n, kt, spec.n, spec.b_k_fast, "col0", "b_at(g, gk, gx)");
  s += "    barrier();\n";
  s += "    for (uint kk = 0u; kk < " + u(kt) + "; ++kk) {\n";
  s += "      float a[" + std::to_string(tm) + "]; float b[" + std::to_string(tn) + "];\n";
  s += "      for (uint i = 0u; i < " + u(tm) + "; ++i) a[i] = As[kk][rm + 16u * i];\n";
  s += "      for (uint j = 0u; j < " + u(tn) + "; ++j) b[j] = Bs[kk][rn + 16u * j];\n";
  s += "      for (uint i = 0u; i < " + u(tm) + "; ++i) for (uint j = 0u; j < " + u(tn) +
       "; ++j) acc[i][j] += a[i] * b[j];\n";
  s += "    }\n    barrier();\n  }\n";
  s += "  for (uint i = 0u; i < " + u(tm) + "; ++i) for (uint j = 0u; j < " + u(tn) + "; ++j) {\n";
  s += "    uint gm = row0 + rm + 16u * i, gn = col0 + rn + 16u * j;\n";
  s += "    if (gm >= " + u(spec.m) + " || gn >= " + u(spec.n) + ") continue;\n";
  if (splits > 1) {
    s += "    P_st(s * " + mnk + " + (g * " + u(spec.m) + " + gm) * " + u(spec.n) +
         " + gn, acc[i][j]);\n";
  } else {
    s += "    c_store(g, gm, gn, acc[i][j]);\n";
  }
  s += "  }\n}\n";

  const std::string tile_name = std::to_string(tile_m) + "x" + std::to_string(tile_n);
  KernelLaunch main;
  main.name = spec.name + "_gemm_" + tile_name + (splits > 1 ? "_splitk" : "");
  main.glsl = std::move(s);
  main.workgroup = {kThreads, 1, 1};
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

  const uint64_t total = static_cast<uint64_t>(spec.m * spec.n * spec.groups);
  const glsl::Linear grid = glsl::linear_grid(total, device);
  std::string body;
  body += "  float v = 0.0;\n";
  body += "  for (uint s = 0u; s < " + u(splits) + "; ++s) v += P_ld(s * " + mnk + " + i);\n";
  body += "  uint g = i / " + u(spec.m * spec.n) + ", r = i % " + u(spec.m * spec.n) + ";\n";
  body += "  c_store(g, r / " + u(spec.n) + ", r % " + u(spec.n) + ", v);\n";
  KernelLaunch finish;
  finish.name = spec.name + "_splitk_sum";
  finish.glsl = common + glsl::gid_function() +
                "void main() {\n  uint i = gid();\n  if (i >= " + u(static_cast<int64_t>(total)) +
                ") return;\n" + body + "}\n";
  finish.workgroup = {grid.local, 1, 1};
  finish.groups = grid.groups;
  finish.bindings = spec.bindings;
  finish.bindings.push_back({ArgRef::scratch(0), false});
  l.launches.push_back(std::move(finish));
  return l;
}

}  // namespace mn::codegen
