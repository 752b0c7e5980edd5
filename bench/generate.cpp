// Prefill and KV-cache decoding of a Hugging Face causal LM (the directory bench/generate.py
// --make writes, so both run the same weights): batch 1, greedy. Prints one JSON line.
// PyTorch counterpart: bench/generate.py.
//
// Usage: bench_generate MODEL_DIR [--dtype f32|f16|bf16] [--precision f32|bf16|f16]
//                       [--kv-dtype f32|f16|bf16]
//                       [--prompt-tokens 256]
//                       [--new-tokens 64] [--prefill-tokens 512] [--device D] [--profile]
//                       [--step-time] [--host-split] [--decode-chain N]
//                       [--plan|--plan-order [--plan-device default|h200]]
// --profile adds the GPU time of the last decode and prefill steps' kernels, summed by name, and
// the largest sums by name and operands (what each launch computes); it decodes one step per
// submission unless --decode-chain is given (then the decode profile is the last chain's).
// --step-time adds the medians of 32 decode steps' GPU time (timestamps at the step's two ends)
// and of their wall time as LmRunner::run sees it: the difference is the host's share.
// With chains of decode steps in one submission (--decode-chain: LmRunnerOptions::decode_chain,
// 0 the runner's default, 1 none), --step-time also gives the medians of 8 chains' GPU and wall
// time, per step.
// --host-split times the pieces of 64 decode steps on a decode-only session of the same model:
// setting the eight inputs, the submission, the wait for the fence and the read of the sampled
// id (medians, ms), beside the step's GPU time: where the host's share goes.
// --plan plans the prefill and decode programs for a device (bench/plan_device.h) without one,
// from config.json alone: each program's dispatches, arena (planned alone; the session shares
// the weights and caches between them) and launches by kernel name; --plan-order adds each
// program's launches in dispatch order with the nodes each covers.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "plan_device.h"
#include "plan_memory.h"

#include <meganeura/causal_lm.h>
#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

namespace {

using mn::bench::ms_since;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = pick(rng);
  return t;
}

// Medians of the parts of a decode step, on a decode-only session of `model`.
nlohmann::json host_split(const mn::HfModel& model, mn::DType dtype, mn::DType cache_dtype,
                          mn::DType precision, const std::string& device, int64_t context) {
  mn::LmStepOptions so;
  so.max_context = context;
  so.dtype = dtype;
  so.cache_dtype = cache_dtype;
  mn::CausalLm lm = mn::build_lm_step(model.config, so);
  mn::SessionOptions opt;
  opt.device = device;
  opt.precision = precision;
  opt.time_steps = true;
  for (const mn::ParameterSpec& p : mn::lm_parameters(model.config)) opt.preset.insert(p.name);
  auto s = mn::build_session(*lm.graph, opt);
  mn::load_weights(*s, model);
  std::map<std::string, std::vector<double>> t;
  for (int32_t i = 0; i < 64 + 8; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    s->set("input_ids", mn::Array({1, 1}, mn::DType::i32, {static_cast<double>(i % 100)}));
    s->set("positions", mn::Array({1, 1}, mn::DType::i32, {static_cast<double>(i)}));
    s->set("last", mn::Array({1}, mn::DType::i32, {0.0}));
    s->set("temperature", mn::Array::scalar(0.0));
    s->set("top_k", mn::Array::scalar(0, mn::DType::i32));
    s->set("top_p", mn::Array::scalar(1.0));
    s->set("seed", mn::Array::scalar(0, mn::DType::u32));
    s->set("step", mn::Array::scalar(static_cast<double>(i), mn::DType::u32));
    const double set_ms = ms_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    s->submit();
    const double submit_ms = ms_since(t1);
    auto t2 = std::chrono::steady_clock::now();
    s->wait();
    const double wait_ms = ms_since(t2);
    auto t3 = std::chrono::steady_clock::now();
    const double id = s->get("next").data[0];
    const double get_ms = ms_since(t3);
    if (i < 8 || id < 0) continue;  // warm-up
    t["set_ms"].push_back(set_ms);
    t["submit_ms"].push_back(submit_ms);
    t["wait_ms"].push_back(wait_ms);
    t["get_ms"].push_back(get_ms);
    t["total_ms"].push_back(ms_since(t0));
    t["gpu_ms"].push_back(s->step_gpu_ms(s->program_names().front()));
  }
  nlohmann::json j;
  for (auto& [k, v] : t) j[k] = mn::bench::median(v);
  return j;
}

// The prefill block and the one-token decode step as LmRunner builds them, planned for
// `device` with products in `precision`.
nlohmann::json plan(const mn::LmConfig& config, mn::DType dtype, mn::DType cache_dtype,
                    mn::DType precision, const mn::plan::PlanOptions& device,
                    int64_t prefill_tokens, int64_t context, bool order) {
  nlohmann::json j;
  for (const auto& [name, block] :
       {std::pair{"prefill", prefill_tokens}, std::pair{"decode", int64_t{1}}}) {
    mn::LmStepOptions so;
    so.block = block;
    so.max_context = context;
    so.dtype = dtype;
    so.cache_dtype = cache_dtype;
    const mn::CausalLm lm = mn::build_lm_step(config, so);
    mn::plan::PlanOptions po = device;
    po.precision = precision;
    const mn::plan::StepPlan p = mn::plan::make_step_plan(*lm.graph, po);
    j[name] = mn::bench::plan_summary(p);
    if (order) j[name]["order"] = mn::bench::launch_order(p);
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_generate MODEL_DIR [options]\n");
    return 2;
  }
  std::string dir = argv[1], dtype = "f32", kv_dtype = "f32", precision = "f32", device,
              plan_device = "default";
  int64_t prompt_tokens = 256, new_tokens = 64, prefill_tokens = 512, decode_chain = 0;
  bool profile = false, step_time = false, split = false, plan_only = false, plan_order = false;
  for (int i = 2; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--dtype"))
      dtype = next();
    else if (!std::strcmp(argv[i], "--kv-dtype"))
      kv_dtype = next();
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
    else if (!std::strcmp(argv[i], "--decode-chain"))
      decode_chain = std::atoll(next());
    else if (!std::strcmp(argv[i], "--profile"))
      profile = true;
    else if (!std::strcmp(argv[i], "--step-time"))
      step_time = true;
    else if (!std::strcmp(argv[i], "--host-split"))
      split = true;
    else if (!std::strcmp(argv[i], "--plan"))
      plan_only = true;
    else if (!std::strcmp(argv[i], "--plan-order"))
      plan_only = plan_order = true;
    else if (!std::strcmp(argv[i], "--plan-device"))
      plan_device = next();
    else
      throw mn::Error(std::string("bench_generate: unknown option ") + argv[i]);
  }
  // --step-time decodes 32 more tokens after the generated ones, then 8 chains of at most 16.
  const int64_t context =
      std::max(prefill_tokens, prompt_tokens + new_tokens + (step_time ? 32 + 8 * 16 : 0));
  if (plan_only) {
    const std::optional<mn::plan::PlanOptions> d = mn::bench::plan_device(plan_device);
    if (!d) {
      std::fprintf(stderr, "bench_generate: --plan-device takes default or h200, got '%s'\n",
                   plan_device.c_str());
      return 2;
    }
    const mn::LmConfig config = mn::load_lm_config(std::filesystem::path(dir) / "config.json");
    nlohmann::json j =
        plan(config, mn::dtype_from_name(dtype), mn::dtype_from_name(kv_dtype),
             mn::dtype_from_name(precision), *d, prefill_tokens, context, plan_order);
    j["name"] = "generate_" + std::filesystem::path(dir).filename().string();
    j["plan_device"] = plan_device;
    std::cout << j.dump() << std::endl;
    return 0;
  }
  const mn::HfModel model = mn::load_hf_model(dir);
  mn::LmRunnerOptions o;
  o.dtype = mn::dtype_from_name(dtype);
  o.cache_dtype = mn::dtype_from_name(kv_dtype);
  o.precision = mn::dtype_from_name(precision);
  o.device = device;
  o.profile = profile;
  o.time_steps = step_time;
  o.max_context = context;
  o.prefill_block = prefill_tokens;
  // A profile's decode kernels are one step's unless a chain is asked for.
  o.decode_chain = profile && decode_chain == 0 ? 1 : decode_chain;
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
                      {"kv_cache", kv_dtype},
                      {"prompt_tokens", prompt_tokens},
                      {"generated_tokens", st.generated_tokens},
                      {"prefill_tokens", prefill_tokens},
                      {"prefill_ms", mn::bench::median(prefill_ms)},
                      {"ms_per_token", per_token},
                      {"decode_chain", runner->chain_length()},
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
    // Chains after those steps, per step.
    const int64_t runs = runner->chain_length();
    if (runs > 0 && runs <= 16) {
      std::vector<double> chain_gpu, chain_wall;
      for (int64_t c = 0; c < 8; ++c) {
        const int32_t position = static_cast<int32_t>(prompt_tokens + new_tokens + 32 + c * runs);
        const int32_t last = 0;
        const auto t = std::chrono::steady_clock::now();
        token = runner
                    ->run_chain({&token, 1}, {&position, 1}, {&last, 1}, greedy,
                                static_cast<uint64_t>(32 + c * runs))
                    .back();
        chain_wall.push_back(ms_since(t) / static_cast<double>(runs));
        chain_gpu.push_back(runner->chain_gpu_ms() / static_cast<double>(runs));
      }
      j["chain_step_gpu_ms"] = mn::bench::median(chain_gpu);
      j["chain_step_wall_ms"] = mn::bench::median(chain_wall);
    }
  }
  if (profile) {
    // The last step of each program (the prompt's prefill block, the last token): its kernels
    // by name, largest total first.
    for (const char* program : {"decode", "prefill"}) {
      double total = 0;
      const std::vector<mn::KernelTime> kernel_times = runner->profile(program);
      for (const mn::KernelTotal& k : mn::kernel_totals(kernel_times)) {
        total += k.ms;
        nlohmann::json row = {k.name, k.ms, k.count};
        if (!k.statistics.empty()) row.push_back(k.statistics);
        j[std::string(program) + "_kernels"].push_back(row);
      }
      j[std::string(program) + "_gpu_ms"] = total;
      // The 25 largest by kernel and what each launch computes (KernelTime::operands).
      nlohmann::json& by_operands = j[std::string(program) + "_kernels_by_operands"];
      by_operands = nlohmann::json::array();
      for (const mn::KernelTotal& k : mn::kernel_totals(kernel_times, true)) {
        if (by_operands.size() == 25) break;
        by_operands.push_back({k.name, k.operands, k.ms, k.count});
      }
    }
  }
  if (split) {
    runner.reset();
    j["decode_host_split"] = host_split(model, o.dtype, o.cache_dtype, o.precision, device,
                                        prompt_tokens + new_tokens + 72);
  }
  std::cout << j.dump() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_generate: %s\n", e.what());
  return 1;
}
