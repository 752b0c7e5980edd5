#include "lm_options.h"

namespace mn::cli {

void add_lm_options(CLI::App& cmd, LmArgs& a) {
  cmd.add_option("model", a.model_dir, "Hugging Face model directory")->required();
  cmd.add_option("--adapter", a.adapter,
                 "PEFT LoRA adapter directory (mn finetune --lora-rank --save) merged into the weights");
  cmd.add_option("--dtype", a.dtype, "storage of the weights: f32, f16 or bf16")
      ->capture_default_str();
  cmd.add_option("--kv-dtype", a.kv_dtype,
                 "storage of the KV cache: f32, f16 or bf16 (half the memory; keys and values "
                 "rounded as they are written)")
      ->capture_default_str();
  cmd.add_option("--precision", a.precision,
                 "products of the prefill in f32, or from bf16 or f16 operands with f32 "
                 "accumulation (decoding's matrix-vector products stay f32)")
      ->capture_default_str();
  cmd.add_option("--device", a.device,
                 "device index or name substring (default: $MN_DEVICE or the best)");
  cmd.add_option("--max-context", a.max_context,
                 "tokens of context per sequence (default: the model's, at most 2048)");
  cmd.add_option("--decode-chain", a.decode_chain,
                 "decode steps in one GPU submission, each fed the token the one before sampled "
                 "(default 8; 1: one submission a token, text shown token by token)");
  cmd.add_option("--max-tokens", a.max_tokens,
                 "tokens to generate at most (default: generation_config.json's, else 256)");
  cmd.add_option("--temperature", a.temperature, "0 is greedy (default: generation_config.json)");
  cmd.add_option("--top-k", a.top_k, "keep the k most likely tokens (0: off)");
  cmd.add_option("--top-p", a.top_p, "keep the most likely tokens up to this probability mass");
  cmd.add_option("--seed", a.seed, "random seed of sampling")->capture_default_str();
  cmd.add_option("--stop", a.stop, "stop before this text (repeatable)");
}

namespace {

// The command line's spelling of each option, for the library's messages.
constexpr GenerationOptionNames kOptionNames{.temperature = "--temperature",
                                             .top_k = "--top-k",
                                             .top_p = "--top-p",
                                             .max_new_tokens = "--max-tokens",
                                             .stop = "--stop"};

GenerationRequest request_of(const LmArgs& a) {
  return {.temperature = a.temperature,
          .top_p = a.top_p,
          .top_k = a.top_k,
          .seed = a.seed,
          .max_new_tokens = a.max_tokens,
          .stop = a.stop};
}

}  // namespace

SamplingOptions sampling_options(const LmArgs& a, const GenerationConfig& g) {
  return resolve_sampling(request_of(a), g, kOptionNames);
}

StopOptions stop_options(const LmArgs& a, const GenerationConfig& g, const Tokenizer& tokenizer,
                         int64_t room) {
  return resolve_stop(request_of(a), g, tokenizer, room, kOptionNames);
}

namespace {

// The float dtype `value` of command-line option `option`, or an error naming both.
DType float_dtype(const char* option, const std::string& value) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    if (value == dtype_name(t)) return t;
  }
  throw Error(std::string(option) + " must be f32, f16 or bf16 (got '" + value + "')");
}

}  // namespace

LmRunnerOptions runner_options(const LmArgs& a, int64_t batch) {
  LmRunnerOptions o;
  o.batch = batch;
  o.dtype = float_dtype("--dtype", a.dtype);
  o.cache_dtype = float_dtype("--kv-dtype", a.kv_dtype);
  o.precision = float_dtype("--precision", a.precision);
  if (a.max_context < 0) {
    throw Error("--max-context must be positive (got " + std::to_string(a.max_context) + ")");
  }
  o.max_context = a.max_context;
  if (a.decode_chain && *a.decode_chain < 1) {
    throw Error("--decode-chain must be at least 1 (got " + std::to_string(*a.decode_chain) + ")");
  }
  o.decode_chain = a.decode_chain.value_or(0);
  o.device = a.device;
  o.adapter = a.adapter;
  return o;
}

}  // namespace mn::cli
