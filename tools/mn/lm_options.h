#pragma once
// Options shared by the language-model commands (generate, chat): the model directory, the
// device and storage dtype, the context, and sampling, whose defaults come from the model's
// generation_config.json when the command line leaves them out.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include <meganeura/generate.h>
#include <meganeura/generation_options.h>
#include <meganeura/hf.h>
#include <meganeura/tokenizer.h>

namespace mn::cli {

struct LmArgs {
  std::string model_dir;
  std::string adapter;  // PEFT LoRA adapter directory merged into the weights
  std::string dtype = "f32";
  std::string kv_dtype = "f32";
  std::string precision = "f32";
  std::string device;
  int64_t max_context = 0;
  std::optional<int64_t> decode_chain;  // unset: the runner's default
  int64_t max_tokens = 0;  // 0: generation_config's max_new_tokens, else 256
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  std::vector<std::string> stop;
};

void add_lm_options(CLI::App& cmd, LmArgs& a);

// What the arguments and the model's generation_config.json ask for; throws mn::Error naming
// the option for a value out of range.
SamplingOptions sampling_options(const LmArgs& a, const GenerationConfig& g);
// Without --max-tokens (and no max_new_tokens in generation_config.json) as many tokens as
// `room` leaves in the context, at most 256.
StopOptions stop_options(const LmArgs& a, const GenerationConfig& g, const Tokenizer& tokenizer,
                         int64_t room);
LmRunnerOptions runner_options(const LmArgs& a, int64_t batch);

}  // namespace mn::cli
