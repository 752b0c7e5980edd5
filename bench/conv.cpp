// Convolution throughput on ResNet-50's distinct conv layers (torchvision's v1.5: the stride
// sits on the 3×3 conv), batch 32, 224×224 images, f32 storage: the forward conv2d, its input
// gradient (conv2d_backward_input) and its weight gradient (conv2d_backward_weight), each the
// only op of a session step. PyTorch counterpart: bench/conv.py (same layers, cuDNN).
//
//   name         where                        C     O   k  s  p  H×W in  H×W out
//   conv1        stem                         3    64   7  2  3  224      112
//   l1_1x1_64    layer1 block1 conv1         64    64   1  1  0   56       56
//   l1_3x3       layer1 conv2                64    64   3  1  1   56       56
//   l1_1x1_up    layer1 conv3 / downsample   64   256   1  1  0   56       56
//   l1_1x1_down  layer1 blocks 2-3 conv1    256    64   1  1  0   56       56
//   l2_3x3_s2    layer2 block1 conv2        128   128   3  2  1   56       28
//   l2_ds        layer2 downsample          256   512   1  2  0   56       28
//   l2_3x3       layer2 blocks 2-4 conv2    128   128   3  1  1   28       28
//   l2_1x1_down  layer2 blocks 2-4 conv1    512   128   1  1  0   28       28
//   l2_1x1_up    layer2 conv3               128   512   1  1  0   28       28
//   l3_3x3       layer3 blocks 2-6 conv2    256   256   3  1  1   14       14
//   l3_1x1_down  layer3 blocks 2-6 conv1   1024   256   1  1  0   14       14
//   l3_1x1_up    layer3 conv3               256  1024   1  1  0   14       14
//   l4_3x3       layer4 blocks 2-3 conv2    512   512   3  1  1    7        7
//   l4_1x1_down  layer4 blocks 2-3 conv1   2048   512   1  1  0    7        7
//   l4_1x1_up    layer4 conv3               512  2048   1  1  0    7        7
//
// One JSON line per (layer, direction, path); "kernel_ms" holds each launch's median time, in
// the order of "kernels". Paths: "default" (what a session selects: 1×1
// unit-stride convolutions as matmuls, cooperative-matrix kernels where the device has them,
// the f32 implicit GEMM otherwise) and "implicit" (MN_CONV_NO_MATMUL=1: the implicit GEMM for
// the 1×1 layers too; only run for layers the routing applies to). "ms_median" sums the GPU
// timestamps of every launch of the step, median of --reps steps after 300 ms of warm-up
// steps; "tflops" = 2·N·O·OH·OW·C·kh·kw / time for all three directions.
//
// Each result is checked at --check sampled output elements against a float64 direct sum on
// the CPU (relative Frobenius error "rel_err"): above 1e-2 when a cooperative (f16 operand)
// kernel ran, above 1e-4 otherwise, the line says "ok": false and the exit status is 1.
//
// Usage: bench_conv [--small] [--batch N] [--layers a,b,...] [--dirs forward,grad_input,
//                   grad_weight] [--paths default,implicit] [--reps N] [--check N] [--device D]
// --small: batch 1, images a quarter the size (56×56 stem input), 2 reps: a smoke test for
// CPU devices (lavapipe).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/session.h>

#include "ir/ops/conv.h"

namespace {

struct Layer {
  std::string name;
  int64_t c, o, k, stride, pad, h;  // square kernel and image
};

const std::vector<Layer>& layers() {
  static const std::vector<Layer> v{
      {"conv1", 3, 64, 7, 2, 3, 224},         {"l1_1x1_64", 64, 64, 1, 1, 0, 56},
      {"l1_3x3", 64, 64, 3, 1, 1, 56},        {"l1_1x1_up", 64, 256, 1, 1, 0, 56},
      {"l1_1x1_down", 256, 64, 1, 1, 0, 56},  {"l2_3x3_s2", 128, 128, 3, 2, 1, 56},
      {"l2_ds", 256, 512, 1, 2, 0, 56},       {"l2_3x3", 128, 128, 3, 1, 1, 28},
      {"l2_1x1_down", 512, 128, 1, 1, 0, 28}, {"l2_1x1_up", 128, 512, 1, 1, 0, 28},
      {"l3_3x3", 256, 256, 3, 1, 1, 14},      {"l3_1x1_down", 1024, 256, 1, 1, 0, 14},
      {"l3_1x1_up", 256, 1024, 1, 1, 0, 14},  {"l4_3x3", 512, 512, 3, 1, 1, 7},
      {"l4_1x1_down", 2048, 512, 1, 1, 0, 7}, {"l4_1x1_up", 512, 2048, 1, 1, 0, 7},
  };
  return v;
}

// One layer at a batch and image size.
struct Geom {
  int64_t n, c, o, k, s, p, h, oh;
  int64_t flops() const { return 2 * n * o * oh * oh * c * k * k; }
  bool routed() const { return k == 1 && s == 1 && p == 0; }  // lowered as a matmul
};

using mn::bench::split;

// Operands of one direction: x [n, c, h, h], w [o, c, k, k], gy [n, o, oh, oh].
struct Data {
  std::vector<float> x, w, gy;
};

double x_at(const Geom& g, const Data& d, int64_t b, int64_t c, int64_t y, int64_t x) {
  if (y < 0 || x < 0 || y >= g.h || x >= g.h) return 0.0;
  return d.x[static_cast<size_t>(((b * g.c + c) * g.h + y) * g.h + x)];
}

double w_at(const Geom& g, const Data& d, int64_t o, int64_t c, int64_t i, int64_t j) {
  return d.w[static_cast<size_t>(((o * g.c + c) * g.k + i) * g.k + j)];
}

double gy_at(const Geom& g, const Data& d, int64_t b, int64_t o, int64_t y, int64_t x) {
  return d.gy[static_cast<size_t>(((b * g.o + o) * g.oh + y) * g.oh + x)];
}

// The float64 value of output element `e` of direction `dir`, summed directly.
double expected(const Geom& g, const Data& d, const std::string& dir, int64_t e) {
  double acc = 0;
  if (dir == "forward") {  // y [n, o, oh, oh]
    const int64_t ox = e % g.oh, oy = e / g.oh % g.oh, o = e / (g.oh * g.oh) % g.o,
                  b = e / (g.oh * g.oh * g.o);
    for (int64_t c = 0; c < g.c; ++c) {
      for (int64_t i = 0; i < g.k; ++i) {
        for (int64_t j = 0; j < g.k; ++j) {
          acc += x_at(g, d, b, c, oy * g.s + i - g.p, ox * g.s + j - g.p) * w_at(g, d, o, c, i, j);
        }
      }
    }
  } else if (dir == "grad_input") {  // dx [n, c, h, h]
    const int64_t xx = e % g.h, yy = e / g.h % g.h, c = e / (g.h * g.h) % g.c,
                  b = e / (g.h * g.h * g.c);
    for (int64_t o = 0; o < g.o; ++o) {
      for (int64_t i = 0; i < g.k; ++i) {
        for (int64_t j = 0; j < g.k; ++j) {
          const int64_t ty = yy + g.p - i, tx = xx + g.p - j;
          if (ty < 0 || tx < 0 || ty % g.s || tx % g.s) continue;
          const int64_t oy = ty / g.s, ox = tx / g.s;
          if (oy >= g.oh || ox >= g.oh) continue;
          acc += gy_at(g, d, b, o, oy, ox) * w_at(g, d, o, c, i, j);
        }
      }
    }
  } else {  // dw [o, c, k, k]
    const int64_t j = e % g.k, i = e / g.k % g.k, c = e / (g.k * g.k) % g.c,
                  o = e / (g.k * g.k * g.c);
    for (int64_t b = 0; b < g.n; ++b) {
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.oh; ++ox) {
          acc +=
              gy_at(g, d, b, o, oy, ox) * x_at(g, d, b, c, oy * g.s + i - g.p, ox * g.s + j - g.p);
        }
      }
    }
  }
  return acc;
}

void set_path_env(const std::string& path) {
  unsetenv("MN_CONV_NO_MATMUL");
  if (path == "implicit") setenv("MN_CONV_NO_MATMUL", "1", 1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device, layers_arg, dirs_arg = "forward,grad_input,grad_weight",
                                  paths_arg = "default,implicit";
  int64_t batch = 32, scale = 1;
  int reps = 10, samples = 48;
  bool reps_set = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--small")) {
      batch = 1;
      scale = 4;
      if (!reps_set) reps = 2;
    } else if (!std::strcmp(argv[i], "--batch")) {
      batch = std::atoll(next().c_str());
    } else if (!std::strcmp(argv[i], "--layers")) {
      layers_arg = next();
    } else if (!std::strcmp(argv[i], "--dirs")) {
      dirs_arg = next();
    } else if (!std::strcmp(argv[i], "--paths")) {
      paths_arg = next();
    } else if (!std::strcmp(argv[i], "--reps")) {
      reps = std::atoi(next().c_str());
      reps_set = true;
    } else if (!std::strcmp(argv[i], "--check")) {
      samples = std::atoi(next().c_str());
    } else if (!std::strcmp(argv[i], "--device")) {
      device = next();
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const std::vector<std::string> dirs = split(dirs_arg), paths = split(paths_arg);
  const std::vector<std::string> wanted = split(layers_arg);
  const std::set<std::string> wanted_set(wanted.begin(), wanted.end());

  bool all_ok = true;
  try {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const Layer& L : layers()) {
      if (!wanted_set.empty() && !wanted_set.count(L.name)) continue;
      const int64_t h = std::max<int64_t>(L.h / scale, L.k);
      const Geom g{batch,    L.c,   L.o, L.k,
                   L.stride, L.pad, h,   mn::conv_out_size(h, L.k, L.stride, L.pad, 1)};
      Data d;
      d.x.resize(static_cast<size_t>(g.n * g.c * g.h * g.h));
      d.w.resize(static_cast<size_t>(g.o * g.c * g.k * g.k));
      d.gy.resize(static_cast<size_t>(g.n * g.o * g.oh * g.oh));
      for (auto* v : {&d.x, &d.w, &d.gy}) {
        for (float& f : *v) f = dist(rng);
      }
      const mn::Conv2dAttrs attrs{g.s, g.s, g.p, g.p, 1, 1, 1};
      for (const std::string& dir : dirs) {
        for (const std::string& path : paths) {
          if (path == "implicit" && !g.routed()) continue;  // identical to "default"
          set_path_env(path);
          mn::Graph graph;
          std::vector<std::pair<std::string, const std::vector<float>*>> feeds;
          mn::Tensor out;
          if (dir == "forward") {
            auto x = graph.input("x", {g.n, g.c, g.h, g.h});
            auto w = graph.input("w", {g.o, g.c, g.k, g.k});
            out = mn::conv2d(x, w, {}, {.stride = {g.s, g.s}, .padding = {g.p, g.p}});
            feeds = {{"x", &d.x}, {"w", &d.w}};
          } else if (dir == "grad_input") {
            auto gy = graph.input("gy", {g.n, g.o, g.oh, g.oh});
            auto w = graph.input("w", {g.o, g.c, g.k, g.k});
            out = mn::conv2d_backward_input(gy, w, attrs, g.h, g.h);
            feeds = {{"gy", &d.gy}, {"w", &d.w}};
          } else if (dir == "grad_weight") {
            auto x = graph.input("x", {g.n, g.c, g.h, g.h});
            auto gy = graph.input("gy", {g.n, g.o, g.oh, g.oh});
            out = mn::conv2d_backward_weight(x, gy, attrs, g.k, g.k);
            feeds = {{"x", &d.x}, {"gy", &d.gy}};
          } else {
            std::fprintf(stderr, "unknown direction %s\n", dir.c_str());
            return 2;
          }
          graph.output("out", out);
          mn::SessionOptions so;
          so.device = device;
          so.profile = true;
          auto session = mn::build_session(graph, so);
          for (const auto& [name, values] : feeds) session->set(name, *values);
          const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
          int warm = 0;
          while (warm < 2 || std::chrono::steady_clock::now() < warm_until) {
            session->step();
            ++warm;
          }
          std::vector<double> ms;
          std::vector<std::vector<double>> per_kernel;  // [launch][rep]
          std::string kernels;
          for (int r = 0; r < reps; ++r) {
            session->step();
            double t = 0;
            kernels.clear();
            const auto prof = session->profile();
            per_kernel.resize(prof.size());
            for (size_t i = 0; i < prof.size(); ++i) {
              t += prof[i].ms;
              kernels += (kernels.empty() ? "" : " ") + prof[i].name;
              per_kernel[i].push_back(prof[i].ms);
            }
            ms.push_back(t);
          }
          std::vector<double> kernel_ms;
          for (const auto& v : per_kernel) kernel_ms.push_back(mn::bench::median(v));
          const std::vector<float> got = session->get_f32("out");
          double err = 0, norm = 0;
          const auto count = static_cast<int64_t>(got.size());
          std::mt19937_64 pick(7);
          std::uniform_int_distribution<int64_t> element(0, count - 1);
          for (int i = 0; i < samples; ++i) {
            const int64_t e = element(pick);
            const double ref = expected(g, d, dir, e);
            const double diff = got[static_cast<size_t>(e)] - ref;
            err += diff * diff;
            norm += ref * ref;
          }
          const double rel = std::sqrt(err / std::max(norm, 1e-300));
          const bool coop = kernels.find("coop") != std::string::npos;
          const bool ok = std::isfinite(rel) && rel <= (coop ? 1e-2 : 1e-4);
          all_ok = all_ok && ok;
          const double t = mn::bench::median(ms);
          nlohmann::json j{
              {"bench", "conv"},
              {"layer", L.name},
              {"dir", dir},
              {"path", path},
              {"batch", g.n},
              {"c", g.c},
              {"o", g.o},
              {"k", g.k},
              {"stride", g.s},
              {"pad", g.p},
              {"h", g.h},
              {"oh", g.oh},
              {"kernels", kernels},
              {"kernel_ms", kernel_ms},
              {"ms_median", t},
              {"tflops", t > 0 ? static_cast<double>(g.flops()) / (t * 1e-3) / 1e12 : 0.0},
              {"rel_err", rel},
              {"ok", ok}};
          std::printf("%s\n", j.dump().c_str());
          std::fflush(stdout);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 1;
  }
  if (!all_ok) std::fprintf(stderr, "bench_conv: a result exceeded its error bound\n");
  return all_ok ? 0 : 1;
}
