#pragma once
// What a caller of generation asks for (sampling, length, stop texts), resolved against the
// model's generation_config.json the way Hugging Face does: what the caller leaves unset, the
// model decides. Shared by `mn generate`/`mn chat` and the Python package.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/tokenizer.h>

namespace mn {

struct GenerationRequest {
  // Unset: generation_config.json's when it asks for sampling (do_sample), else greedy / off.
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  // 0: generation_config.json's max_new_tokens, else what the context leaves, at most 256.
  int64_t max_new_tokens = 0;
  std::vector<std::string> stop;  // texts that end generation (each non-empty)
};

// How the caller spells each option, for error messages ("--top-k" on the command line,
// "top_k" in Python).
struct GenerationOptionNames {
  const char* temperature = "temperature";
  const char* top_k = "top_k";
  const char* top_p = "top_p";
  const char* max_new_tokens = "max_new_tokens";
  const char* stop = "stop";
};

// mn::Error naming the option for a value out of range (a negative or NaN temperature, a
// negative top_k, a top_p outside (0, 1]).
SamplingOptions resolve_sampling(const GenerationRequest& request, const GenerationConfig& config,
                                 const GenerationOptionNames& names = {});
// Stop ids: the tokenizer's end-of-turn tokens and generation_config.json's eos ids. `room`:
// the context left after the longest prompt.
StopOptions resolve_stop(const GenerationRequest& request, const GenerationConfig& config,
                         const Tokenizer& tokenizer, int64_t room,
                         const GenerationOptionNames& names = {});

}  // namespace mn
