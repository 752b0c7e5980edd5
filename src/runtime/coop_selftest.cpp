#include "runtime/coop_selftest.h"

#include <cmath>
#include <iomanip>
#include <memory>
#include <sstream>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/shader/shader_compiler.h"
#include "runtime/coop_support.h"
#include "runtime/host_tensor.h"
#include "runtime/run_lowering.h"
#include "vulkan/arena.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn::runtime {

namespace {

struct Case {
  std::string tag;
  Shape a, b;
  bool ta = false, tb = false;
  DType dtype = DType::f32;
  double scale = 1;  // of the operands' values
};

// Ragged rows, columns and K steps on every tile; vector loads (contiguous extents multiple of
// 8) in the first and third, scalar loads and a broadcast batch in the second, tiny values in
// the last.
// A tile of either kernel: subgroup tile `index` (coop_tiles()) or workgroup tile `index`
// (coop_wg_tiles()).
struct TileRef {
  bool wg = false;
  int index = 0;
  int bm() const { return wg ? wg_tile().bm : sg_tile().bm; }
  int bn() const { return wg ? wg_tile().bn : sg_tile().bn; }
  int bk() const { return wg ? wg_tile().bk : sg_tile().bk; }
  const codegen::CoopTile& sg_tile() const { return codegen::coop_tiles()[static_cast<size_t>(index)]; }
  const codegen::CoopWgTile& wg_tile() const {
    return codegen::coop_wg_tiles()[static_cast<size_t>(index)];
  }
  std::string name() const { return wg ? wg_tile().name : sg_tile().name; }
  int bit() const { return wg ? codegen::kCoopWgTileBit + index : index; }
};

std::vector<TileRef> all_tiles() {
  std::vector<TileRef> r;
  for (size_t i = 0; i < codegen::coop_tiles().size(); ++i) r.push_back({false, static_cast<int>(i)});
  for (size_t i = 0; i < codegen::coop_wg_tiles().size(); ++i) r.push_back({true, static_cast<int>(i)});
  return r;
}

std::vector<Case> cases(const TileRef& t, bool f16) {
  const int64_t m = t.bm() + t.bm() / 2 + 3, n = t.bn() + 8, k = 88;
  std::vector<Case> c;
  c.push_back({"nn_vec", {m, k}, {k, n}, false, false, DType::f32});
  const int64_t m2 = t.bm() - 3, n2 = t.bn() + 5, k2 = 45;
  c.push_back({"tt_scalar_batch", {2, k2, m2}, {n2, k2}, true, true, DType::f32});
  if (t.wg) {
    // f16 operands are read in place by the workgroup kernel: whole tiles. Whole f32 tiles
    // take its direct store.
    const int64_t mw = 2 * t.bm(), kw = 2 * t.bk();
    if (f16) c.push_back({"nt_f16", {mw, kw}, {t.bn(), kw}, false, true, DType::f16});
    c.push_back({"tn_whole", {kw, mw}, {kw, t.bn()}, true, false, DType::f32});
  } else if (f16) {
    c.push_back({"nt_f16", {m, k}, {n, k}, false, true, DType::f16});
  }
  // Magnitudes of deep-network activations and gradients, below f16's normal range: right
  // only when the packed operands are scaled (exactly, by powers of two).
  c.push_back({"nn_tiny", {m, k}, {k, n}, false, false, DType::f32, std::ldexp(1.0, -30)});
  return c;
}

struct Built {
  Graph graph;
  NodeId node = 0;
  std::vector<TensorType> types;
};

std::unique_ptr<Built> build(const Case& c) {
  auto b = std::make_unique<Built>();
  Tensor a = b->graph.input("a", c.a, c.dtype);
  Tensor bb = b->graph.input("b", c.b, c.dtype);
  Tensor out = matmul(a, bb, c.ta, c.tb);
  b->graph.output("c", out);
  b->node = out.id();
  b->types = {b->graph.node(a.id()).type, b->graph.node(bb.id()).type};
  return b;
}

codegen::Lowering lower(const Built& b, const TileRef& tile, const codegen::DeviceTraits& t) {
  const codegen::LowerContext ctx{b.graph.node(b.node), b.types, t};
  const codegen::MatmulGeometry g = codegen::geometry(ctx);
  const int64_t batch = numel(g.out_batch);
  if (tile.wg) return codegen::lower_matmul_coop_wg(ctx, g, batch, tile.wg_tile(), nullptr);
  const codegen::CoopTile& st = tile.sg_tile();
  return codegen::lower_matmul_coop(ctx, g, batch, st, codegen::coop_options_for(st, g, t),
                                    nullptr);
}

// Values on a 1/64 grid in [-2, 2]: exact in f16, so the products are exact and only the f32
// accumulation rounds.
std::vector<double> values(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<double>(static_cast<int>(x >> 20) % 257 - 128) / 64.0;
  }
  return v;
}

// Relative Frobenius error of the kernel's output against the exact product.
double run_case(vk::Device& dev, const Case& c, const Built& b, const codegen::Lowering& low,
                const codegen::DeviceTraits& t) {
  const Node& n = b.graph.node(b.node);
  auto av = values(static_cast<size_t>(b.types[0].numel()), 1);
  auto bv = values(static_cast<size_t>(b.types[1].numel()), 2);
  for (auto& v : av) v *= c.scale;
  for (auto& v : bv) v *= c.scale;
  codegen::CompileOptions co;
  co.target = codegen::target_env_for(dev.capabilities().api_version);
  co.coop_khr = t.coop_khr;
  const std::vector<double> operands[] = {av, bv};
  const DType dtypes[] = {c.dtype, c.dtype};
  const auto got = run_lowering(dev, low, operands, dtypes, n.type.numel(), n.type.dtype, co);

  // The exact product, batch by batch (A may carry a batch that B broadcasts over).
  const int64_t m = c.ta ? c.a[c.a.size() - 1] : c.a[c.a.size() - 2];
  const int64_t kk = c.ta ? c.a[c.a.size() - 2] : c.a[c.a.size() - 1];
  const int64_t nn = c.tb ? c.b[c.b.size() - 2] : c.b[c.b.size() - 1];
  const int64_t batches = n.type.numel() / (m * nn);
  const int64_t a_batches = b.types[0].numel() / (m * kk),
                b_batches = b.types[1].numel() / (kk * nn);
  double err = 0, norm = 0;
  for (int64_t z = 0; z < batches; ++z) {
    const double* A = av.data() + (a_batches == 1 ? 0 : z) * m * kk;
    const double* B = bv.data() + (b_batches == 1 ? 0 : z) * kk * nn;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < nn; ++j) {
        double s = 0;
        for (int64_t p = 0; p < kk; ++p) {
          s += (c.ta ? A[p * m + i] : A[i * kk + p]) * (c.tb ? B[j * kk + p] : B[p * nn + j]);
        }
        const double dlt = got[static_cast<size_t>((z * m + i) * nn + j)] - s;
        err += dlt * dlt;
        norm += s * s;
      }
    }
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

}  // namespace

std::string coop_selftest_fingerprint(const codegen::DeviceTraits& t) {
  std::string all;
  for (const TileRef& tile : all_tiles()) {
    if (tile.wg && !codegen::coop_wg_tile_supported(tile.wg_tile(), t)) continue;
    for (const Case& c : cases(tile, t.storage_16bit)) {
      try {
        for (const auto& k : lower(*build(c), tile, t).launches) all += k.glsl;
      } catch (const Error& e) {
        all += e.what();
      }
    }
  }
  return all;
}

uint32_t run_coop_selftest(vk::Device& dev, const codegen::DeviceTraits& t, std::string* report) {
  uint32_t mask = 0;
  for (const TileRef& tile : all_tiles()) {
    // Workgroup tiles the device cannot run are not tested (and never chosen).
    if (tile.wg && !codegen::coop_wg_tile_supported(tile.wg_tile(), t)) continue;
    bool ok = true;
    for (const Case& c : cases(tile, t.storage_16bit)) {
      std::string line = tile.name() + " " + c.tag + ": ";
      try {
        auto b = build(c);
        const double err = run_case(dev, c, *b, lower(*b, tile, t), t);
        // Exact products, f32 accumulation over K <= 88: anything above 1e-5 is a wrong result
        // (f16 outputs add their own rounding, 2^-11 at most per element).
        const double tol = c.dtype == DType::f16 ? 1e-3 : 1e-5;
        const bool good = std::isfinite(err) && err <= tol;
        ok = ok && good;
        std::ostringstream e;
        e << std::setprecision(3) << err;  // 0 for exact products, not a rounded "0.000000"
        line += "relative error " + e.str() + (good ? "" : " FAILED");
      } catch (const std::exception& e) {
        ok = false;
        line += std::string("FAILED: ") + e.what();
      }
      if (report) *report += line + "\n";
    }
    if (ok) mask |= 1u << tile.bit();
  }
  return mask;
}

void configure_device_coop(const vk::Device& dev, codegen::DeviceTraits& t) {
  // The self-test creates pipelines and buffers on the device: not const on its handle, but the
  // device is shared and long-lived (device_pool.h), so it is the same object sessions use.
  auto& d = const_cast<vk::Device&>(dev);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  const CoopCandidate cand = coop_candidate(dev.capabilities(), coop_mode_from_env());
  if (!cand.usable) {
    t.coop = false;
    return;  // no fingerprint to compute, no kernels to generate
  }
  configure_coop(
      dev.capabilities(), coop_mode_from_env(), default_coop_cache(), coop_selftest_fingerprint(t),
      [&](const codegen::DeviceTraits& trial) { return run_coop_selftest(d, trial); }, t);
}

}  // namespace mn::runtime
