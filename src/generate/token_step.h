#pragma once
// What the token runners of causal LMs and vision-language models share: their shape from the
// options, the build laps, and one step of a recorded KV-cache program (prefill block or
// one-token decode: the token block, its positions, the sampled position and the sampling
// inputs set, the program run, the sampled ids read back).
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

namespace mn::gen {

// Sequences, cache rows, prefill block and decode chain of a runner from its options (0: the
// defaults, the context min(max_position_embeddings, 2048), the block min(128, context), chains
// of 8 steps); mn::Error naming `who` for bad values.
// `chain`: decode steps per chain (LmRunnerOptions::decode_chain; 0 or 1: none).
struct RunnerShape {
  int64_t batch = 1, context = 0, block = 0, chain = 0;
};
RunnerShape runner_shape(const char* who, const LmRunnerOptions& options, const LmConfig& config);

// Seconds between successive calls (the build stages of a runner).
class Laps {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t0_).count();
    t0_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

inline std::vector<double> as_doubles(std::span<const int32_t> v) { return {v.begin(), v.end()}; }

// The program for a call of `tokens.size() / batch` tokens per sequence: "decode" for one,
// "prefill" for `prefill_block`; mn::Error naming both otherwise.
std::string_view step_program(const char* who, int64_t batch, int64_t prefill_block,
                              size_t tokens);

std::vector<int32_t> run_token_step(Session& s, std::string_view program, int64_t batch,
                                    std::span<const int32_t> tokens,
                                    std::span<const int32_t> positions,
                                    std::span<const int32_t> last, const SamplingOptions& sampling,
                                    uint64_t counter);

// A decode chain of `runs` steps: the tokens, positions and counter of the first; the sampled
// tokens of every step, step by step.
std::vector<int32_t> run_token_chain(Session& s, std::string_view program, int64_t batch,
                                     int64_t runs, std::span<const int32_t> tokens,
                                     std::span<const int32_t> positions,
                                     std::span<const int32_t> last, const SamplingOptions& sampling,
                                     uint64_t counter);

// The chain of a decode program of `runs` steps: positions and counters given per step, the
// sampled token fed to the next step and collected from every step.
ProgramChain decode_chain(int64_t runs);

}  // namespace mn::gen
