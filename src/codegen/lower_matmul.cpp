// Batched matmul with broadcast batch dims and transposed operands: a shared-memory tiled f32
// kernel (16×16 threads, each computing a T×T block of a 16T×16T output tile). Tensor-core
// variants live beside it.
#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"
#include "ir/ops/matmul.h"

namespace mn::codegen {

namespace {

struct MatmulGeometry {
  int64_t m = 1, n = 1, k = 1;
  Shape a_batch, b_batch, out_batch;
  bool ta = false, tb = false;
};

MatmulGeometry geometry(const LowerContext& ctx) {
  MatmulGeometry g;
  const auto& attrs = ctx.node.attrs.as<MatmulAttrs>();
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  g.ta = attrs.transpose_a && a.size() >= 2;
  g.tb = attrs.transpose_b && b.size() >= 2;
  if (a.size() == 1) {
    g.k = a[0];
  } else {
    g.m = g.ta ? a[a.size() - 1] : a[a.size() - 2];
    g.k = g.ta ? a[a.size() - 2] : a[a.size() - 1];
    g.a_batch.assign(a.begin(), a.end() - 2);
  }
  if (b.size() == 1) {
    g.n = 1;
  } else {
    g.n = g.tb ? b[b.size() - 2] : b[b.size() - 1];
    g.b_batch.assign(b.begin(), b.end() - 2);
  }
  g.out_batch = broadcast_shapes(g.a_batch, g.b_batch, "matmul");
  return g;
}

Lowering lower_matmul(const LowerContext& ctx) {
  const MatmulGeometry g = geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  // 64×64 tiles with 4×4 per thread once both sides fill them; 16×16 tiles otherwise.
  const int t = (g.m >= 64 && g.n >= 64) ? 4 : 1;
  const int tile = 16 * t;
  const std::string M = std::to_string(g.m) + "u", N = std::to_string(g.n) + "u",
                    K = std::to_string(g.k) + "u", T = std::to_string(t), TILE = std::to_string(tile);

  std::string s = glsl::header();
  s += glsl::buffer(0, ctx.inputs[0].dtype, "A", true);
  s += glsl::buffer(1, ctx.inputs[1].dtype, "B", true);
  s += glsl::buffer(2, ctx.node.type.dtype, "C", false);
  s += "shared float As[16][" + TILE + " + 1];\nshared float Bs[16][" + TILE + " + 1];\n";
  s += "void main() {\n";
  s += "  uint lid = gl_LocalInvocationID.x; uint tx = lid % 16u; uint ty = lid / 16u;\n";
  s += "  uint row0 = gl_WorkGroupID.y * " + TILE + "u; uint col0 = gl_WorkGroupID.x * " + TILE + "u;\n";
  s += "  uint bz = gl_WorkGroupID.z;\n";
  s += glsl::unravel(g.out_batch, "bz", "q");
  s += "  uint abase = " + glsl::broadcast_offset(g.a_batch, g.out_batch, "q") + " * " +
       std::to_string(g.m * g.k) + "u;\n";
  s += "  uint bbase = " + glsl::broadcast_offset(g.b_batch, g.out_batch, "q") + " * " +
       std::to_string(g.k * g.n) + "u;\n";
  s += "  float acc[" + T + "][" + T + "];\n";
  s += "  for (int i = 0; i < " + T + "; ++i) for (int j = 0; j < " + T + "; ++j) acc[i][j] = 0.0;\n";
  s += "  for (uint k0 = 0u; k0 < " + K + "; k0 += 16u) {\n";
  // Loads: 16×tile elements per operand, 256 threads; the fastest index follows memory order.
  const std::string per_thread = std::to_string(16 * tile / 256);
  s += "    for (uint e = 0u; e < " + per_thread + "u; ++e) {\n";
  s += "      uint idx = lid + e * 256u;\n";
  if (g.ta) {
    s += "      uint mm = idx % " + TILE + "u, kk = idx / " + TILE + "u;\n";
  } else {
    s += "      uint kk = idx % 16u, mm = idx / 16u;\n";
  }
  s += "      uint gm = row0 + mm, gk = k0 + kk;\n";
  s += "      As[kk][mm] = (gm < " + M + " && gk < " + K + ") ? A_ld(abase + " +
       (g.ta ? "gk * " + M + " + gm" : "gm * " + K + " + gk") + ") : 0.0;\n";
  if (g.tb) {
    s += "      uint kb = idx % 16u, nn = idx / 16u;\n";
  } else {
    s += "      uint nn = idx % " + TILE + "u, kb = idx / " + TILE + "u;\n";
  }
  s += "      uint gn = col0 + nn, gkb = k0 + kb;\n";
  s += "      Bs[kb][nn] = (gn < " + N + " && gkb < " + K + ") ? B_ld(bbase + " +
       (g.tb ? "gn * " + K + " + gkb" : "gkb * " + N + " + gn") + ") : 0.0;\n";
  s += "    }\n    barrier();\n";
  s += "    for (uint kk = 0u; kk < 16u; ++kk) {\n";
  s += "      float a[" + T + "]; float b[" + T + "];\n";
  s += "      for (uint i = 0u; i < " + T + "u; ++i) a[i] = As[kk][ty + 16u * i];\n";
  s += "      for (uint j = 0u; j < " + T + "u; ++j) b[j] = Bs[kk][tx + 16u * j];\n";
  s += "      for (uint i = 0u; i < " + T + "u; ++i) for (uint j = 0u; j < " + T + "u; ++j) acc[i][j] += a[i] * b[j];\n";
  s += "    }\n    barrier();\n  }\n";
  s += "  uint cbase = bz * " + std::to_string(g.m * g.n) + "u;\n";
  s += "  for (uint i = 0u; i < " + T + "u; ++i) for (uint j = 0u; j < " + T + "u; ++j) {\n";
  s += "    uint gm = row0 + ty + 16u * i, gn = col0 + tx + 16u * j;\n";
  s += "    if (gm < " + M + " && gn < " + N + ") C_st(cbase + gm * " + N + " + gn, acc[i][j]);\n";
  s += "  }\n}\n";

  KernelLaunch k;
  k.name = "matmul_" + TILE + "x" + TILE;
  k.glsl = std::move(s);
  k.workgroup = {256, 1, 1};
  k.groups = {static_cast<uint32_t>((g.n + tile - 1) / tile),
              static_cast<uint32_t>((g.m + tile - 1) / tile), static_cast<uint32_t>(batch)};
  if (k.groups[0] > ctx.device.max_group_count || k.groups[1] > ctx.device.max_group_count ||
      k.groups[2] > ctx.device.max_group_count) {
    throw Error("matmul: grid " + std::to_string(k.groups[0]) + "x" + std::to_string(k.groups[1]) +
                "x" + std::to_string(k.groups[2]) + " exceeds the device's limits");
  }
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace

void register_matmul_lowerings(LoweringRegistry& r) { r.add("matmul", lower_matmul); }

}  // namespace mn::codegen
