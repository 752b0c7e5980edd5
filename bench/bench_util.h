#pragma once
// Pieces the benchmarks share: the median they report, the fields every training-step
// benchmark prints about its session, comma lists, wall times and random inputs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/session.h>

namespace mn::bench {

// "a,b,,c" → {"a", "b", "c"}: the lists of sizes, batches and lengths the options take.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');) {
    if (!p.empty()) out.push_back(p);
  }
  return out;
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// f32 values of a fixed stream: uniform in [-1, 1), or standard normal.
enum class Draw { uniform, normal };
inline Array random_array(const Shape& shape, uint64_t seed, Draw draw = Draw::uniform) {
  Array a(shape, DType::f32);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::normal_distribution<double> n(0.0, 1.0);
  for (double& v : a.data) v = static_cast<float>(draw == Draw::uniform ? u(rng) : n(rng));
  return a;
}

// The upper median (the middle element of an odd count); 0 for no samples.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Step times (ms, one per timed step) and what the compiled step is: device, dispatches,
// barriers, arena size, and with profiling the GPU time of the last step.
inline nlohmann::json step_fields(const Session& s, const std::vector<double>& step_ms,
                                  bool profile) {
  const MemorySummary mem = s.memory();
  nlohmann::json j = {
      {"device", s.device_name()},
      {"step_ms_median", median(step_ms)},
      {"step_ms_min", step_ms.empty() ? 0 : *std::min_element(step_ms.begin(), step_ms.end())},
      {"dispatches", mem.dispatches},
      {"barriers", mem.barriers},
      {"arena_mib", static_cast<double>(mem.arena_bytes) / (1 << 20)}};
  if (profile) {
    double gpu = 0;
    nlohmann::json kernels = nlohmann::json::array();
    const std::vector<KernelTime> kernel_times = s.profile();
    for (const KernelTotal& k : kernel_totals(kernel_times)) {
      gpu += k.ms;
      kernels.push_back({{"name", k.name}, {"ms", k.ms}, {"count", k.count}});
      if (!k.statistics.empty()) kernels.back()["statistics"] = k.statistics;
    }
    j["gpu_ms"] = gpu;
    j["kernels"] = kernels;
    // The 40 largest by kernel and operands: which products of one kernel name take the time.
    nlohmann::json by_operands = nlohmann::json::array();
    for (const KernelTotal& k : kernel_totals(kernel_times, true)) {
      if (by_operands.size() == 40) break;
      by_operands.push_back(
          {{"name", k.name}, {"operands", k.operands}, {"ms", k.ms}, {"count", k.count}});
    }
    j["kernels_by_operands"] = by_operands;
  }
  return j;
}

// A session built with SessionOptions::profile stepped 3 times to warm up, then `reps` times:
// the median of the timed steps' summed kernel times, their range, and the last step's kernels.
// The copies of the step's outputs to the host ("download", and "upload" of its inputs) are
// summed apart (transfer_ms): PyTorch's counterparts time the kernels alone.
struct ProfiledSteps {
  double gpu_ms_median = 0, gpu_ms_min = 0, gpu_ms_max = 0, transfer_ms = 0;
  std::vector<KernelTime> kernels;
};
inline bool host_transfer(const KernelTime& k) {
  return k.name == "download" || k.name == "upload";
}
inline ProfiledSteps profiled_steps(Session& s, int reps) {
  for (int i = 0; i < 3; ++i) s.step();
  std::vector<double> ms;
  ProfiledSteps p;
  for (int i = 0; i < reps; ++i) {
    s.step();
    p.kernels = s.profile();
    double total = 0;
    p.transfer_ms = 0;
    for (const KernelTime& k : p.kernels) (host_transfer(k) ? p.transfer_ms : total) += k.ms;
    ms.push_back(total);
  }
  p.gpu_ms_median = median(ms);
  if (!ms.empty()) {
    p.gpu_ms_min = *std::min_element(ms.begin(), ms.end());
    p.gpu_ms_max = *std::max_element(ms.begin(), ms.end());
  }
  return p;
}

}  // namespace mn::bench
