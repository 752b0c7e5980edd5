// Matmul throughput, f32 storage: the cooperative-matrix kernel (f16 operands, f32
// accumulation) against the scalar f32 kernel, on square and training shapes. Prints one JSON
// line per (shape, path), after one line with the device's cooperative-matrix self-test.
// PyTorch counterpart: bench/matmul.py (same shapes, fp16 and fp32).
//
// Each result is checked against a float64 product on the CPU over sampled rows (relative
// Frobenius error, "rel_err"); a coop result above 1e-2 or a scalar one above 1e-4 marks the
// line "ok": false and the exit status 1.
//
// Paths: "coop" (the default selection: cooperative kernel when the self-test passed and the
// shape is worth it), "scalar" (MN_DISABLE_COOP=1), "khr" (MN_COOP=khr: the same kernel
// through the SPV_KHR rewrite, where the device has VK_KHR_cooperative_matrix).
//
// --train N: a 30-layer MLP trained N steps on the coop and the scalar path from the same start;
// prints the largest relative difference of the first step's gradients and of the losses.
//
// Usage: bench_matmul [--shapes square|training|prefill|step8|small|all|none|MxKxN,...] [--paths
// coop,scalar,khr] [--train N]
//                     [--reps N] [--check-rows R] [--dtype f32|f16|bf16] [--device D]
//                     [--tensor-tiles all|default,NAME,...] [--warm-ms MS]
// --dtype f16 (bf16) stores operands and result in f16 (bf16): no conversion while staging.
// --tensor-tiles runs each shape once per tensor-addressed tile forced (MN_COOP_TENSOR_TILE;
// "default": the kernel's own choice), in one process: a sweep that compiles and warms its
// pipelines once, where one process per tile spends most of a call on the driver's first code.
// A tile that does not fit a shape leaves it to the choice; the line's "kernel" says which ran.
// --warm-ms: how long each session steps before the timed steps (default 300; the driver
// replaces a new pipeline's first, slow code some time after creating it).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_tensor.h"
#include "runtime/coop_selftest.h"
#include "runtime/coop_support.h"
#include "runtime/device_pool.h"
#include "runtime/plan_options.h"

namespace {

struct Shape3 {
  int64_t m, k, n;
  std::string tag;
};

std::vector<Shape3> shapes(const std::string& which) {
  std::vector<Shape3> s;
  if (which == "square" || which == "all") {
    for (int64_t v : {1024, 2048, 4096, 8192}) s.push_back({v, v, v, "square"});
  }
  if (which == "training" || which == "all") {
    s.push_back({256, 576, 1536, "training"});
    s.push_back({256, 1536, 576, "training"});
    s.push_back({256, 576, 49152, "training"});
    s.push_back({64, 784, 128, "training"});
    // SmolLM2-135M at 1 x 256: the q/o projection and the weight gradients (K = the tokens).
    s.push_back({256, 576, 576, "training"});
    s.push_back({576, 256, 576, "training"});
    s.push_back({576, 256, 1536, "training"});
  }
  if (which == "prefill" || which == "all") {
    // SmolLM2-135M prefilling 512 tokens: q and o, k and v, gate and up, down projections.
    s.push_back({512, 576, 576, "prefill"});
    s.push_back({512, 576, 192, "prefill"});
    s.push_back({512, 576, 1536, "prefill"});
    s.push_back({512, 1536, 576, "prefill"});
  }
  if (which == "step8" || which == "all") {
    // SmolLM2-135M's training step at 8 x 512 (4096 tokens): the projections forward (q and o, k
    // and v, gate and up, down, the LM head) and the weight gradients (K = the tokens).
    for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{
             {576, 576}, {576, 192}, {576, 1536}, {1536, 576}, {576, 49152}}) {
      s.push_back({4096, k, n, "step8"});
    }
    for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>>{
             {576, 576}, {192, 576}, {1536, 576}, {576, 1536}}) {
      s.push_back({m, 4096, n, "step8"});
    }
  }
  if (which == "small" || which == "all") {
    for (int64_t v : {32, 64, 128, 256, 512}) s.push_back({v, v, v, "small"});
    s.push_back({64, 64, 4096, "small"});
    s.push_back({16, 1024, 1024, "small"});
  }
  return s;
}

// "MxKxN[,MxKxN...]": explicit shapes (tag "given"); nullopt if `which` is not such a list.
std::optional<std::vector<Shape3>> given_shapes(const std::string& which) {
  std::vector<Shape3> s;
  std::stringstream ss(which);
  for (std::string item; std::getline(ss, item, ',');) {
    int64_t d[3] = {0, 0, 0};
    const char* p = item.data();
    const char* end = item.data() + item.size();
    for (int i = 0; i < 3; ++i) {
      const auto [next, ec] = std::from_chars(p, end, d[i]);
      if (ec != std::errc() || d[i] <= 0) return std::nullopt;
      p = next;
      if (i < 2) {
        if (p == end || *p != 'x') return std::nullopt;
        ++p;
      }
    }
    if (p != end) return std::nullopt;
    s.push_back({d[0], d[1], d[2], "given"});
  }
  if (s.empty()) return std::nullopt;
  return s;
}

void set_path_env(const std::string& path) {
  unsetenv("MN_DISABLE_COOP");
  unsetenv("MN_COOP");
  if (path == "scalar") setenv("MN_DISABLE_COOP", "1", 1);
  if (path == "khr") setenv("MN_COOP", "khr", 1);
}

// Relative Frobenius error over `rows` sampled rows of C = A·B.
double check(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
             const Shape3& s, int rows) {
  double err = 0, norm = 0;
  std::vector<double> acc(static_cast<size_t>(s.n));
  for (int r = 0; r < rows; ++r) {
    const int64_t i = rows == 1 ? 0 : (s.m - 1) * r / (rows - 1);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t p = 0; p < s.k; ++p) {
      const double av = a[static_cast<size_t>(i * s.k + p)];
      const float* brow = b.data() + p * s.n;
      for (int64_t j = 0; j < s.n; ++j) acc[static_cast<size_t>(j)] += av * brow[j];
    }
    for (int64_t j = 0; j < s.n; ++j) {
      const double d = c[static_cast<size_t>(i * s.n + j)] - acc[static_cast<size_t>(j)];
      err += d * d;
      norm += acc[static_cast<size_t>(j)] * acc[static_cast<size_t>(j)];
    }
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

// A 30-layer MLP (width 1024, batch 256, ReLU, SGD) trained for `steps` steps from the same
// start on one path; returns the losses and the first step's gradients by name. Width 1024
// keeps every hidden product above the cooperative kernel's thresholds (K = 256 products of a
// width-256 network stay on the scalar kernel, which would make the comparison vacuous).
struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> grads;
  int coop_kernels = 0;
};

TrainRun train(const std::string& device, int steps) {
  mn::Graph g;
  const int64_t batch = 256, width = 1024, layers = 30;
  auto x = g.input("x", {batch, width});
  auto y = g.input("y", {batch}, mn::DType::i32);
  mn::Tensor h = x;
  for (int64_t i = 1; i <= layers; ++i) {
    const bool last = i == layers;
    h = mn::linear(h, last ? 10 : width, "fc" + std::to_string(i), static_cast<uint64_t>(i));
    if (!last) h = mn::relu(h);
  }
  mn::add_training_step(mn::cross_entropy(h, y), mn::Optimizer::sgd(), {}, true);
  mn::SessionOptions so;
  so.device = device;
  so.profile = true;
  auto s = mn::build_session(g, so);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xv(static_cast<size_t>(batch * width));
  std::vector<int32_t> yv(static_cast<size_t>(batch));
  for (float& v : xv) v = u(rng);
  for (int32_t& v : yv) v = static_cast<int32_t>(rng() % 10);
  TrainRun r;
  for (int i = 0; i < steps; ++i) {
    s->set("x", xv);
    s->set("y", yv);
    s->set_scalar("lr", 0.01);
    s->set_scalar("step", i + 1);
    s->step();
    r.losses.push_back(s->get("loss").data[0]);
    if (i == 0) {
      for (const auto& name : s->output_names()) {
        if (name.rfind("grad/", 0) == 0) r.grads[name] = s->get_f32(name);
      }
      for (const auto& k : s->profile()) r.coop_kernels += k.name.find("coop") != std::string::npos;
    }
  }
  return r;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(e / std::max(n, 1e-300));
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all", device, paths_arg = "coop,scalar", dtype_arg = "f32";
  int reps = 10, check_rows = 16, train_steps = 0, warm_ms = 300;
  std::string tensor_tiles_arg;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--shapes")) {
      which = next();
    } else if (!std::strcmp(argv[i], "--paths")) {
      paths_arg = next();
    } else if (!std::strcmp(argv[i], "--reps")) {
      reps = std::atoi(next().c_str());
    } else if (!std::strcmp(argv[i], "--check-rows")) {
      check_rows = std::atoi(next().c_str());
    } else if (!std::strcmp(argv[i], "--train")) {
      train_steps = std::atoi(next().c_str());
    } else if (!std::strcmp(argv[i], "--dtype")) {
      dtype_arg = next();
    } else if (!std::strcmp(argv[i], "--device")) {
      device = next();
    } else if (!std::strcmp(argv[i], "--tensor-tiles")) {
      tensor_tiles_arg = next();
    } else if (!std::strcmp(argv[i], "--warm-ms")) {
      const std::string v = next();
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), warm_ms);
      if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
        std::fprintf(stderr, "bench_matmul: --warm-ms takes milliseconds, got '%s'\n", v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const std::vector<std::string> sets{"square", "training", "prefill", "step8", "small", "all",
                                      "none"};
  const std::optional<std::vector<Shape3>> given = given_shapes(which);
  if (!given && std::find(sets.begin(), sets.end(), which) == sets.end()) {
    std::fprintf(stderr,
                 "bench_matmul: --shapes takes square, training, prefill, step8, small, "
                 "all, none or MxKxN[,MxKxN...], got '%s'\n",
                 which.c_str());
    return 2;
  }
  std::vector<std::string> paths;
  {
    std::stringstream ss(paths_arg);
    for (std::string p; std::getline(ss, p, ',');) paths.push_back(p);
  }
  // The tensor-addressed tiles to force, "" for the kernel's own choice.
  std::vector<std::string> forced{""};
  if (!tensor_tiles_arg.empty()) {
    forced.clear();
    std::vector<std::string> known{"default"};
    for (const mn::codegen::TensorTile& t : mn::codegen::tensor_tiles()) known.push_back(t.name);
    std::stringstream ss(tensor_tiles_arg == "all" ? std::string() : tensor_tiles_arg);
    std::vector<std::string> names;
    for (std::string t; std::getline(ss, t, ',');) names.push_back(t);
    if (tensor_tiles_arg == "all") names = known;
    for (const std::string& t : names) {
      if (std::find(known.begin(), known.end(), t) == known.end()) {
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        std::fprintf(stderr, "bench_matmul: --tensor-tiles: no tile '%s' (tiles: all, %s)\n",
                     t.c_str(), list.c_str());
        return 2;
      }
      forced.push_back(t == "default" ? "" : t);
    }
  }
  if (warm_ms < 0) {
    std::fprintf(stderr, "bench_matmul: --warm-ms %d is negative\n", warm_ms);
    return 2;
  }

  bool all_ok = true;
  try {
    // The self-test, run afresh (not from the cache) with its per-case report.
    auto dev = mn::runtime::shared_device(device, std::nullopt);
    const auto& caps = dev->capabilities();
    for (const std::string mode : {"nv", "khr"}) {
      const auto cand =
          mn::runtime::coop_candidate(caps, mode == std::string("khr") ? mn::runtime::CoopMode::khr
                                                                       : mn::runtime::CoopMode::nv);
      nlohmann::json j{{"bench", "matmul"},
                       {"selftest", mode},
                       {"device", caps.name},
                       {"driver", caps.driver_version},
                       {"candidate", cand.usable},
                       {"reason", cand.reason},
                       {"shared_bytes", caps.compute.shared_memory_bytes},
                       {"multiprocessors", caps.compute.multiprocessors}};
      if (cand.usable) {
        mn::codegen::DeviceTraits t = mn::runtime::device_traits(caps);
        t.coop = true;
        t.coop_khr = cand.khr;
        std::string report;
        const uint32_t mask = mn::runtime::run_coop_selftest(*dev, t, &report);
        j["tiles_passed_mask"] = mask;
        j["report"] = report;
      }
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }

    if (train_steps > 0) {
      set_path_env("coop");
      const TrainRun coop = train(device, train_steps);
      set_path_env("scalar");
      const TrainRun scalar = train(device, train_steps);
      double grad_max = 0, loss_max = 0;
      std::string worst;
      for (const auto& [name, gv] : scalar.grads) {
        const double d = rel_diff(coop.grads.at(name), gv);
        if (d > grad_max) {
          grad_max = d;
          worst = name;
        }
      }
      for (size_t i = 0; i < coop.losses.size(); ++i) {
        loss_max = std::max(loss_max, std::abs(coop.losses[i] - scalar.losses[i]) /
                                          std::max(std::abs(scalar.losses[i]), 1e-30));
      }
      // Not ok either when the coop run used no cooperative kernel: nothing was compared.
      const bool ok =
          std::isfinite(grad_max) && grad_max <= 1e-2 && loss_max <= 1e-2 && coop.coop_kernels > 0;
      all_ok = all_ok && ok;
      nlohmann::json j{{"bench", "matmul"},
                       {"train", "mlp30_w1024_b256_sgd"},
                       {"steps", train_steps},
                       {"coop_kernels_per_step", coop.coop_kernels},
                       {"scalar_coop_kernels_per_step", scalar.coop_kernels},
                       {"grad_rel_diff_max", grad_max},
                       {"grad_rel_diff_worst", worst},
                       {"loss_rel_diff_max", loss_max},
                       {"loss_first", {coop.losses.front(), scalar.losses.front()}},
                       {"loss_last", {coop.losses.back(), scalar.losses.back()}},
                       {"ok", ok}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }

    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const Shape3& s : given ? *given : shapes(which)) {
      std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n));
      for (auto& v : a) v = dist(rng);
      for (auto& v : b) v = dist(rng);
      for (const std::string& path : paths)
        for (const std::string& tile : forced) {
          set_path_env(path);
          if (tile.empty()) {
            unsetenv("MN_COOP_TENSOR_TILE");
          } else {
            setenv("MN_COOP_TENSOR_TILE", tile.c_str(), 1);
          }
          mn::Graph g;
          const mn::DType dt = dtype_arg == "f32" ? mn::DType::f32 : mn::dtype_from_name(dtype_arg);
          auto x = g.input("a", {s.m, s.k}, dt);
          auto w = g.input("b", {s.k, s.n}, dt);
          g.output("c", mn::matmul(x, w));
          mn::SessionOptions so;
          so.device = device;
          so.profile = true;
          auto session = mn::build_session(g, so);
          session->set("a", a);
          session->set("b", b);
          std::vector<double> ms;
          std::string kernel, statistics;
          // Steps until the GPU has been busy for a while (clocks up), then the timed ones.
          const auto warm_until =
              std::chrono::steady_clock::now() + std::chrono::milliseconds(warm_ms);
          int warm = 0;
          while (warm < 2 || std::chrono::steady_clock::now() < warm_until) {
            session->step();
            ++warm;
          }
          for (int r = 0; r < reps; ++r) {
            session->step();
            double t = 0;
            for (const auto& k : session->profile()) {
              if (k.name.rfind("matmul", 0) == 0) {
                t += k.ms;
                kernel = k.name;
                statistics = k.statistics;
              }
            }
            ms.push_back(t);
          }
          const auto c = session->get_f32("c");
          const double err =
              check(a, b, c, s, static_cast<int>(std::min<int64_t>(check_rows, s.m)));
          const bool coop_kernel = kernel.find("coop") != std::string::npos ||
                                   kernel.find("tensor") != std::string::npos;
          const bool ok =
              std::isfinite(err) && err <= (coop_kernel || dtype_arg != "f32" ? 1e-2 : 1e-4);
          all_ok = all_ok && ok;
          const double t = mn::bench::median(ms);
          nlohmann::json j{{"bench", "matmul"},
                           {"m", s.m},
                           {"k", s.k},
                           {"n", s.n},
                           {"tag", s.tag},
                           {"path", path},
                           {"dtype", dtype_arg},
                           {"kernel", kernel},
                           {"ms_median", t},
                           {"tflops", t > 0 ? 2.0 * s.m * s.n * s.k / (t * 1e-3) / 1e12 : 0.0},
                           {"rel_err", err},
                           {"ok", ok}};
          if (!statistics.empty()) j["statistics"] = statistics;
          if (const char* tile = std::getenv("MN_COOP_TILE")) j["forced_tile"] = tile;
          if (!tile.empty()) j["forced_tensor_tile"] = tile;
          if (const char* st = std::getenv("MN_COOP_STAGES")) j["forced_stages"] = st;
          std::printf("%s\n", j.dump().c_str());
          std::fflush(stdout);
        }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matmul: %s\n", e.what());
    return 1;
  }
  if (!all_ok) std::fprintf(stderr, "bench_matmul: a result exceeded its error bound\n");
  return all_ok ? 0 : 1;
}
