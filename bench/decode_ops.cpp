// The per-token ops of language-model decoding, each the only op of a session step, timed with
// GPU timestamps (median of --reps steps after warm-up):
//   attention: cached_attention with one query per sequence (Llama 3.2 1B's heads: 32 query and
//     8 key/value heads of 64, or --heads; SmolLM2-135M has 9,3) over a cache of --cache slots,
//     at several positions: its time
//     should follow the position (the visible keys), not the cache size.
//   sample: sample_tokens over Qwen's 151936-token vocabulary, greedy and with temperature 0.8,
//     top_k 50 and top_p 0.95, and with top_p 0.95 alone.
// One JSON line per case with "gpu_ms_median" (the sum of the step's kernel times) and the
// kernels launched. PyTorch counterpart: bench/decode_ops.py.
//
// Usage: bench_decode_ops [--batch N] [--heads HQ,HKV] [--cache T] [--reps N] [--device D]
//                         [--cases attention|sample|all] [--warm-ms MS] [--small]
// --warm-ms: steps run for this long (300 ms) before the timed ones: a few steps alone leave the
// GPU's clocks low (the same kernel measured 43 and 183 µs on the H100 without it).
// --small: batch 1, a 512-slot cache, a 4096-token vocabulary and 3 reps, for CPU devices.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/session.h>

#include "bench_util.h"

namespace {

struct Options {
  int64_t batch = 8, cache = 4096, vocab = 151936, hq = 32, hkv = 8;
  int reps = 50;
  double warm_ms = 300;  // steps run before the timed ones, so that the clocks have risen
  std::string device;
  std::string cases = "all";  // attention, sample or all
};

mn::Array random_array(const mn::Shape& shape, mn::DType dtype, double spread, uint64_t seed) {
  mn::Array a(shape, dtype);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-spread, spread);
  for (double& v : a.data) v = mn::round_to_dtype(d(rng), dtype);
  return a;
}

// Median GPU time of a step of `g` with `inputs` set, and the kernels it ran.
nlohmann::json time_steps(const mn::Graph& g,
                          const std::vector<std::pair<std::string, mn::Array>>& inputs,
                          const Options& o) {
  mn::SessionOptions so;
  so.device = o.device;
  so.profile = true;
  auto s = mn::build_session(g, so);
  for (const auto& [name, value] : inputs) s->set(name, value);
  const auto start = std::chrono::steady_clock::now();
  while (
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() <
      o.warm_ms) {
    s->step();
  }
  const mn::bench::ProfiledSteps steps = mn::bench::profiled_steps(*s, o.reps);
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : steps.kernels) {
    kernels.push_back(k.statistics.empty()
                          ? nlohmann::json(k.name)
                          : nlohmann::json{{"name", k.name}, {"statistics", k.statistics}});
  }
  return {{"device", s->device_name()}, {"gpu_ms_median", steps.gpu_ms_median}, {"kernels", kernels}};
}

void attention_cases(const Options& o) {
  const int64_t hq = o.hq, hkv = o.hkv, d = 64;
  for (int64_t position : std::set<int64_t>{0, 255, o.cache / 4 - 1, o.cache - 1}) {
    mn::Graph g;
    mn::Tensor q = g.input("q", {o.batch, hq, 1, d}, mn::DType::f16);
    mn::Tensor k = g.input("k", {o.batch, hkv, o.cache, d}, mn::DType::f16);
    mn::Tensor v = g.input("v", {o.batch, hkv, o.cache, d}, mn::DType::f16);
    mn::Tensor pos = g.input("pos", {o.batch, 1, 1}, mn::DType::i32);
    g.output("out", mn::cached_attention(q, k, v, pos));
    mn::Array p({o.batch, 1, 1}, mn::DType::i32);
    for (double& x : p.data) x = static_cast<double>(position);
    nlohmann::json j =
        time_steps(g,
                   {{"q", random_array({o.batch, hq, 1, d}, mn::DType::f16, 1.0, 1)},
                    {"k", random_array({o.batch, hkv, o.cache, d}, mn::DType::f16, 1.0, 2)},
                    {"v", random_array({o.batch, hkv, o.cache, d}, mn::DType::f16, 1.0, 3)},
                    {"pos", p}},
                   o);
    j["case"] = "attention";
    j["batch"] = o.batch;
    j["cache"] = o.cache;
    j["position"] = position;
    j["heads"] = {hq, hkv};
    std::printf("%s\n", j.dump().c_str());
  }
}

void sample_cases(const Options& o) {
  struct Case {
    const char* name;
    double temperature;
    int top_k;
    double top_p;
  };
  for (const Case& c : {Case{"greedy", 0.0, 0, 1.0}, Case{"top_k_top_p", 0.8, 50, 0.95},
                        Case{"top_p", 1.0, 0, 0.95}}) {
    mn::Graph g;
    g.output("tokens", mn::sample_tokens(g.input("logits", {o.batch, o.vocab}, mn::DType::f16),
                                         g.input("t", {}), g.input("k", {}, mn::DType::i32),
                                         g.input("p", {}), g.input("seed", {}, mn::DType::u32),
                                         g.input("step", {}, mn::DType::u32)));
    nlohmann::json j =
        time_steps(g,
                   {{"logits", random_array({o.batch, o.vocab}, mn::DType::f16, 8.0, 4)},
                    {"t", mn::Array({}, mn::DType::f32, {c.temperature})},
                    {"k", mn::Array({}, mn::DType::i32, {static_cast<double>(c.top_k)})},
                    {"p", mn::Array({}, mn::DType::f32, {c.top_p})},
                    {"seed", mn::Array({}, mn::DType::u32, {1.0})},
                    {"step", mn::Array({}, mn::DType::u32, {0.0})}},
                   o);
    j["case"] = std::string("sample_") + c.name;
    j["batch"] = o.batch;
    j["vocab"] = o.vocab;
    std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--batch") && more) {
      o.batch = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--heads") && more) {
      if (std::sscanf(argv[++i], "%ld,%ld", &o.hq, &o.hkv) != 2 || o.hq <= 0 || o.hkv <= 0 ||
          o.hq % o.hkv != 0) {
        std::fprintf(stderr, "--heads takes Hq,Hkv with Hq a multiple of Hkv, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--cases") && more) {
      o.cases = argv[++i];
      if (o.cases != "attention" && o.cases != "sample" && o.cases != "all") {
        std::fprintf(stderr, "--cases takes attention, sample or all, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--warm-ms") && more) {
      o.warm_ms = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--cache") && more) {
      o.cache = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && more) {
      o.reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--device") && more) {
      o.device = argv[++i];
    } else if (!std::strcmp(argv[i], "--small")) {
      o.batch = 1, o.cache = 512, o.vocab = 4096, o.reps = 3, o.warm_ms = 0;
    } else {
      std::fprintf(stderr,
                   "usage: bench_decode_ops [--batch N] [--heads HQ,HKV] [--cache T] [--reps N] "
                   "[--device D] "
                   "[--cases attention|sample|all] [--warm-ms MS] [--small]\n");
      return 2;
    }
  }
  try {
    if (o.cases != "sample") attention_cases(o);
    if (o.cases != "attention") sample_cases(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
