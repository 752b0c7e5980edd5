#pragma once
// Text generation with a KV cache: prompts are run through the model in blocks (prefill), then
// one token per step (decode); each step samples the next token of every sequence on the device.
//
// The loop (generate) is written against TokenModel, the model as a cache-keeping next-token
// sampler, so it runs the same on a GPU session and on the CPU reference.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <meganeura/dtype.h>
#include <meganeura/session.h>

namespace mn {

struct HfModel;

// Hugging Face's order: temperature, then top-k, then top-p. temperature 0 is greedy (argmax).
struct SamplingOptions {
  double temperature = 0.0;
  int64_t top_k = 0;   // 0: off
  double top_p = 1.0;  // 1: off
  uint64_t seed = 0;
};

struct StopOptions {
  int64_t max_new_tokens = 128;
  std::vector<int32_t> stop_ids;         // eos and end-of-turn tokens; the token itself is kept
  std::vector<std::string> stop_strings;  // generated text ends before the first occurrence
};

// A model that appends the keys and values of a block of tokens to its cache and samples the
// token that follows a chosen position of each sequence.
class TokenModel {
 public:
  virtual ~TokenModel() = default;
  virtual int64_t batch() const = 0;
  virtual int64_t max_context() const = 0;
  // Tokens per sequence in one prefill call (decode calls take one).
  virtual int64_t prefill_block() const = 0;
  // tokens, positions: [batch, block] row-major (block = prefill_block() or 1); `last` holds per
  // sequence the index inside the block whose next token is sampled. `counter` varies the random
  // stream from call to call. Returns one sampled token per sequence.
  virtual std::vector<int32_t> run(std::span<const int32_t> tokens,
                                   std::span<const int32_t> positions,
                                   std::span<const int32_t> last, const SamplingOptions& sampling,
                                   uint64_t counter) = 0;
  // Decode steps that one call of run_chain takes; 0: the model offers no chains.
  virtual int64_t chain_length() const { return 0; }
  // chain_length() decode steps in one call, the same as that many run() calls of one token per
  // sequence: the first as given, each later one taking the tokens the step before sampled, at
  // the next positions, with the next counter. Returns the sampled tokens, step by step
  // ([chain_length(), batch] row-major).
  virtual std::vector<int32_t> run_chain(std::span<const int32_t> tokens,
                                         std::span<const int32_t> positions,
                                         std::span<const int32_t> last,
                                         const SamplingOptions& sampling, uint64_t counter);
};

enum class FinishReason : uint8_t { stop_token, stop_string, length };
const char* finish_reason_name(FinishReason r);

struct GeneratedSequence {
  std::vector<int32_t> tokens;  // generated tokens (a stop token included)
  std::string text;             // their text, cut before a stop string
  FinishReason finish = FinishReason::length;
};

struct GenerateCallbacks {
  // Decodes generated tokens to text (the tokenizer); required for stop strings and on_text.
  std::function<std::string(std::span<const int32_t>)> decode;
  // Text of sequence `index` as it becomes final (never a partial UTF-8 character, never a
  // prefix of a stop string that may still complete).
  std::function<void(int64_t index, std::string_view text)> on_text;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;  // summed over the sequences
  int64_t generated_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  int64_t decode_steps = 0;
};

// Generates after each prompt (at most model.batch() of them, each non-empty). `start[i]` is the
// position the prompt begins at in sequence i's cache (0 for a fresh sequence; a conversation
// continues where its last turn ended). Throws mn::Error when a prompt does not fit the context.
std::vector<GeneratedSequence> generate(TokenModel& model,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const SamplingOptions& sampling, const StopOptions& stop,
                                        const GenerateCallbacks& callbacks = {},
                                        std::span<const int64_t> start = {},
                                        GenerateStats* stats = nullptr);

// A Hugging Face causal LM on a device: one session with two recorded programs over the same
// weights and KV cache (a prefill block of several tokens, and a one-token decode step), each
// ending in the sampling kernel, so a step reads back one token id per sequence.
struct LmRunnerOptions {
  int64_t batch = 1;
  int64_t max_context = 0;    // cache rows per sequence; 0: min(max_position_embeddings, 2048)
  int64_t prefill_block = 0;  // tokens per prefill call; 0: min(128, max_context)
  DType dtype = DType::f32;   // storage of the weights (f32, f16, bf16)
  DType cache_dtype = DType::f32;  // storage of the KV cache (f32, f16, bf16; LmStepOptions)
  DType precision = DType::f32;  // products: as SessionOptions::precision (prefill blocks)
  std::string device;         // as SessionOptions::device
  bool profile = false;       // GPU timestamps around every kernel (LmRunner::profile)
  bool time_steps = false;    // GPU timestamps at the ends of every step (LmRunner::step_gpu_ms)
  // Decode steps recorded into one submission (TokenModel::run_chain), each fed the token the
  // one before sampled on the device: generate() runs them wherever every sequence has that
  // many tokens still to come. 0: 8; 1: every decode step its own submission.
  int64_t decode_chain = 0;
  // A PEFT LoRA adapter directory merged into the weights after loading (merge_lora_adapter in
  // meganeura/finetune.h); empty: none.
  std::filesystem::path adapter;
};

class LmRunner : public TokenModel {
 public:
  static std::unique_ptr<LmRunner> create(const HfModel& model, const LmRunnerOptions& options);
  virtual const std::string& device_name() const = 0;
  // Seconds spent building the graphs, compiling the session (plan, shaders, pipelines) and
  // uploading the weights.
  struct BuildTimes {
    double graphs = 0, session = 0, weights = 0;
    double total() const { return graphs + session + weights; }
  };
  virtual const BuildTimes& build_times() const = 0;
  double build_seconds() const { return build_times().total(); }
  virtual MemorySummary memory() const = 0;  // of the session (per program: dispatches, bytes)
  // With LmRunnerOptions::profile, the kernels of the last step of `program` ("decode" or
  // "prefill") and their GPU times.
  virtual std::vector<KernelTime> profile(std::string_view program = "decode") const = 0;
  // With LmRunnerOptions::time_steps or profile, the GPU time of the last step of `program`.
  virtual double step_gpu_ms(std::string_view program = "decode") const = 0;
  // The same for the last chain of decode steps (all its steps).
  virtual double chain_gpu_ms() const = 0;
};

}  // namespace mn
