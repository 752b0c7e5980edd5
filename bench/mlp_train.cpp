// Training-step time of small MLPs: one step = upload the batch, forward, backward and the
// optimizer update in one submission, read the loss back. Prints one JSON line per workload.
// PyTorch counterpart: bench/mlp_train.py (same models, batches and optimizers).
//
// Each workload runs twice in the same process: the graph as written (one kernel per op,
// "optimized": false) and optimized (e-graph + fusion, "optimized": true).
//
// Usage: bench_mlp_train [--steps N] [--device D] [--profile] [--only optimized|baseline]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

namespace {

struct Workload {
  std::string name;
  std::vector<int64_t> sizes;  // input, hidden..., classes
  int64_t batch;
  mn::Optimizer optimizer;
  double lr;
  bool last_bias;
};

mn::Tensor build(mn::Graph& g, const Workload& w) {
  auto x = g.input("x", {w.batch, w.sizes.front()});
  auto y = g.input("y", {w.batch}, mn::DType::i32);
  mn::Tensor h = x;
  for (size_t i = 1; i < w.sizes.size(); ++i) {
    const bool last = i + 1 == w.sizes.size();
    h = mn::linear(h, w.sizes[i], "fc" + std::to_string(i), 10 * i, !last || w.last_bias);
    if (!last) h = mn::relu(h);
  }
  return mn::cross_entropy(h, y);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 200;
  std::string device;
  bool profile = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc)
      device = argv[++i];
    else if (!std::strcmp(argv[i], "--profile"))
      profile = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: bench_mlp_train [--steps N] [--device D] [--profile] "
                   "[--only optimized|baseline]\n");
      return 2;
    }
  }
  const std::vector<Workload> workloads = {
      {"mlp_ci_b16", {128, 64, 64, 10}, 16, mn::Optimizer::sgd(), 0.01, false},
      {"mlp_mnist_b64", {784, 128, 10}, 64, mn::Optimizer::adam(), 1e-3, true},
      {"mlp_mnist_b1024", {784, 128, 10}, 1024, mn::Optimizer::adam(), 1e-3, true},
  };
  try {
    for (const Workload& w : workloads)
      for (bool optimized : {false, true}) {
        if (!only.empty() && only != (optimized ? "optimized" : "baseline")) continue;
        mn::Graph g;
        mn::add_training_step(build(g, w), w.optimizer);
        mn::SessionOptions so;
        so.device = device;
        so.profile = profile;
        so.optimize = optimized;
        auto s = mn::build_session(g, so);
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> u(0, 1);
        std::vector<float> x(static_cast<size_t>(w.batch * w.sizes.front()));
        std::vector<int32_t> y(static_cast<size_t>(w.batch));
        for (float& v : x) v = u(rng);
        for (int32_t& v : y) v = static_cast<int32_t>(rng() % 10);
        std::vector<double> times;
        double loss = 0;
        for (int i = 0; i < steps + 20; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          s->set("x", x);
          s->set("y", y);
          for (const auto& [n, v] : mn::step_scalars(w.optimizer, w.lr, i + 1)) s->set_scalar(n, v);
          s->step();
          loss = s->get("loss").data[0];
          auto t1 = std::chrono::steady_clock::now();
          if (i >= 20) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        nlohmann::json j = mn::bench::step_fields(*s, times, profile);
        j.update({{"name", w.name},
                  {"impl", "meganeura"},
                  {"optimized", optimized},
                  {"steps", steps},
                  {"final_loss", loss}});
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mlp_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
