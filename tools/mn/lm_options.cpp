#include "lm_options.h"

#include <algorithm>
#include <cmath>

namespace mn::cli {

void add_lm_options(CLI::App& cmd, LmArgs& a) {
  cmd.add_option("model", a.model_dir, "Hugging Face model directory")->required();
  cmd.add_option("--adapter", a.adapter,
                 "PEFT LoRA adapter directory (mn finetune --lora-rank --save) merged into the weights");
  cmd.add_option("--dtype", a.dtype, "storage of the weights: f32, f16 or bf16 (the cache is f32)")
      ->capture_default_str();
  cmd.add_option("--precision", a.precision,
                 "products of the prefill in f32, or from bf16 or f16 operands with f32 "
                 "accumulation (decoding's matrix-vector products stay f32)")
      ->capture_default_str();
  cmd.add_option("--device", a.device,
                 "device index or name substring (default: $MN_DEVICE or the best)");
  cmd.add_option("--max-context", a.max_context,
                 "tokens of context per sequence (default: the model's, at most 2048)");
  cmd.add_option("--max-tokens", a.max_tokens,
                 "tokens to generate at most (default: generation_config.json's, else 256)");
  cmd.add_option("--temperature", a.temperature, "0 is greedy (default: generation_config.json)");
  cmd.add_option("--top-k", a.top_k, "keep the k most likely tokens (0: off)");
  cmd.add_option("--top-p", a.top_p, "keep the most likely tokens up to this probability mass");
  cmd.add_option("--seed", a.seed, "random seed of sampling")->capture_default_str();
  cmd.add_option("--stop", a.stop, "stop before this text (repeatable)");
}

SamplingOptions sampling_options(const LmArgs& a, const GenerationConfig& g) {
  SamplingOptions s;
  // Without a temperature on the command line, the model's own choice: sampling with its
  // parameters when generation_config.json says do_sample, else greedy.
  s.temperature = a.temperature.value_or(g.do_sample ? g.temperature : 0.0);
  s.top_k = a.top_k.value_or(g.do_sample ? g.top_k : 0);
  s.top_p = a.top_p.value_or(g.do_sample ? g.top_p : 1.0);
  s.seed = a.seed;
  if (!std::isfinite(s.temperature) || s.temperature < 0) {
    throw Error("--temperature must be a finite number >= 0 (got " +
                std::to_string(s.temperature) + ")");
  }
  if (s.top_k < 0) throw Error("--top-k must be >= 0 (got " + std::to_string(s.top_k) + ")");
  if (!(s.top_p > 0 && s.top_p <= 1)) {
    throw Error("--top-p must be in (0, 1] (got " + std::to_string(s.top_p) + ")");
  }
  return s;
}

StopOptions stop_options(const LmArgs& a, const GenerationConfig& g, const Tokenizer& tokenizer,
                         int64_t room) {
  StopOptions s;
  if (a.max_tokens < 0) {
    throw Error("--max-tokens must be positive (got " + std::to_string(a.max_tokens) + ")");
  }
  s.max_new_tokens = a.max_tokens > 0
                         ? a.max_tokens
                         : g.max_new_tokens.value_or(std::clamp<int64_t>(room, 1, 256));
  s.stop_ids = tokenizer.stop_ids();
  for (int64_t id : g.eos_token_id) s.stop_ids.push_back(static_cast<int32_t>(id));
  std::sort(s.stop_ids.begin(), s.stop_ids.end());
  s.stop_ids.erase(std::unique(s.stop_ids.begin(), s.stop_ids.end()), s.stop_ids.end());
  for (const std::string& t : a.stop) {
    if (t.empty()) throw Error("--stop: the stop text is empty");
    s.stop_strings.push_back(t);
  }
  return s;
}

LmRunnerOptions runner_options(const LmArgs& a, int64_t batch) {
  LmRunnerOptions o;
  o.batch = batch;
  o.dtype = dtype_from_name(a.dtype);
  if (!is_float(o.dtype)) throw Error("--dtype must be f32, f16 or bf16 (got " + a.dtype + ")");
  o.precision = dtype_from_name(a.precision);
  if (!is_float(o.precision)) {
    throw Error("--precision must be f32, f16 or bf16 (got " + a.precision + ")");
  }
  if (a.max_context < 0) {
    throw Error("--max-context must be positive (got " + std::to_string(a.max_context) + ")");
  }
  o.max_context = a.max_context;
  o.device = a.device;
  o.adapter = a.adapter;
  return o;
}

}  // namespace mn::cli
