// Prefill and KV-cache decoding of a Hugging Face causal LM (the directory bench/generate.py
// --make writes, so both run the same weights): batch 1, greedy. Prints one JSON line.
// PyTorch counterpart: bench/generate.py.
//
// Usage: bench_generate MODEL_DIR [--dtype f32|f16|bf16] [--precision f32|bf16|f16]
//                       [--prompt-tokens 256]
//                       [--new-tokens 64] [--prefill-tokens 512] [--device D] [--profile]
//                       [--step-time]
// --profile adds the GPU time of the last decode and prefill steps' kernels, summed by name.
// --step-time adds the medians of 32 decode steps' GPU time (timestamps at the step's two ends)
// and of their wall time as LmRunner::run sees it: the difference is the host's share.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"

#include <meganeura/generate.h>
#include <meganeura/hf.h>

namespace {

using mn::bench::ms_since;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = pick(rng);
  return t;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_generate MODEL_DIR [options]\n");
    return 2;
  }
  std::string dir = argv[1], dtype = "f32", precision = "f32", device;
  int64_t prompt_tokens = 256, new_tokens = 64, prefill_tokens = 512;
  bool profile = false, step_time = false;
  for (int i = 2; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--dtype"))
      dtype = next();
    else if (!std::strcmp(argv[i], "--precision"))
      precision = next();
    else if (!std::strcmp(argv[i], "--prompt-tokens"))
      prompt_tokens = std::atoll(next());
    else if (!std::strcmp(argv[i], "--new-tokens"))
      new_tokens = std::atoll(next());
    else if (!std::strcmp(argv[i], "--prefill-tokens"))
      prefill_tokens = std::atoll(next());
    else if (!std::strcmp(argv[i], "--device"))
      device = next();
    else if (!std::strcmp(argv[i], "--profile"))
      profile = true;
    else if (!std::strcmp(argv[i], "--step-time"))
      step_time = true;
    else
      throw mn::Error(std::string("bench_generate: unknown option ") + argv[i]);
  }
  const mn::HfModel model = mn::load_hf_model(dir);
  mn::LmRunnerOptions o;
  o.dtype = mn::dtype_from_name(dtype);
  o.precision = mn::dtype_from_name(precision);
  o.device = device;
  o.profile = profile;
  o.time_steps = step_time;
  // --step-time decodes 32 more tokens after the generated ones.
  o.max_context = std::max(prefill_tokens, prompt_tokens + new_tokens + (step_time ? 32 : 0));
  o.prefill_block = prefill_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  auto runner = mn::LmRunner::create(model, o);
  const double build_ms = ms_since(t0);
  const int64_t vocab = model.config.vocab_size;

  // Prefill: one block of prefill_tokens tokens, timed over repetitions.
  std::vector<double> prefill_ms, prefill_gpu_ms;
  const auto block = random_tokens(prefill_tokens, vocab, 1);
  for (int r = 0; r < 12; ++r) {
    mn::StopOptions one;
    one.max_new_tokens = 1;
    mn::GenerateStats st;
    mn::generate(*runner, {block}, {}, one, {}, {}, &st);
    if (r >= 2) prefill_ms.push_back(st.prefill_ms);
    if (r >= 2 && step_time) prefill_gpu_ms.push_back(runner->step_gpu_ms("prefill"));
  }
  // Decoding after a prompt of prompt_tokens tokens.
  mn::StopOptions stop;
  stop.max_new_tokens = new_tokens;
  mn::GenerateStats st;
  mn::generate(*runner, {random_tokens(prompt_tokens, vocab, 2)}, {}, stop, {}, {}, &st);
  const double per_token = st.decode_ms / static_cast<double>(std::max<int64_t>(1, st.decode_steps));
  nlohmann::json j = {{"name", "generate_" + std::filesystem::path(dir).filename().string()},
                      {"impl", "meganeura"},
                      {"precision", dtype},
                      {"products", precision},
                      {"prompt_tokens", prompt_tokens},
                      {"generated_tokens", st.generated_tokens},
                      {"prefill_tokens", prefill_tokens},
                      {"prefill_ms", mn::bench::median(prefill_ms)},
                      {"ms_per_token", per_token},
                      {"tokens_per_second", 1e3 / per_token},
                      {"build_ms", build_ms},
                      {"arena_mib", static_cast<double>(runner->memory().arena_bytes) / (1 << 20)},
                      {"device", runner->device_name()}};
  for (const mn::ProgramMemory& p : runner->memory().programs) {
    j["dispatches_" + p.name] = p.dispatches;
    j["barriers_" + p.name] = p.barriers;
  }
  if (step_time) {
    // Single decode steps at the positions after the prompt and its generated tokens.
    std::vector<double> gpu, wall;
    mn::SamplingOptions greedy;
    int32_t token = 1;
    for (int64_t i = 0; i < 32; ++i) {
      const int32_t position = static_cast<int32_t>(prompt_tokens + new_tokens + i);
      const int32_t last = 0;
      const auto t = std::chrono::steady_clock::now();
      token = runner->run({&token, 1}, {&position, 1}, {&last, 1}, greedy,
                          static_cast<uint64_t>(i))[0];
      wall.push_back(ms_since(t));
      gpu.push_back(runner->step_gpu_ms("decode"));
    }
    j["decode_step_gpu_ms"] = mn::bench::median(gpu);
    j["decode_step_wall_ms"] = mn::bench::median(wall);
    j["prefill_step_gpu_ms"] = mn::bench::median(prefill_gpu_ms);
  }
  if (profile) {
    // The last step of each program (the prompt's prefill block, the last token): its kernels
    // by name, largest total first.
    for (const char* program : {"decode", "prefill"}) {
      double total = 0;
      for (const mn::KernelTotal& k : mn::kernel_totals(runner->profile(program))) {
        total += k.ms;
        j[std::string(program) + "_kernels"].push_back({k.name, k.ms, k.count});
      }
      j[std::string(program) + "_gpu_ms"] = total;
    }
  }
  std::cout << j.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_generate: %s\n", e.what());
  return 1;
}
