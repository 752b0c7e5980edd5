// The pieces the token runners (LmRunner, VlmRunner) share: their shape from the options, the
// program of a call, and one step of it.
#include <algorithm>
#include <string>

#include <meganeura/error.h>

#include "generate/token_step.h"

namespace mn::gen {

// 0 means "the default" for the context and the block; negative values are errors, never
// replaced by it.
RunnerShape runner_shape(const char* who, const LmRunnerOptions& o, const LmConfig& config) {
  auto at_least = [who](int64_t v, int64_t least, const char* what) {
    if (v < least) {
      throw Error(std::string(who) + ": " + what + " must be at least " + std::to_string(least) +
                  " (got " + std::to_string(v) + ")");
    }
  };
  at_least(o.batch, 1, "batch");
  at_least(o.max_context, 0, "max_context");
  at_least(o.prefill_block, 0, "prefill_block");
  at_least(o.decode_chain, 0, "decode_chain");
  if (!is_float(o.dtype)) {
    throw Error(std::string(who) + ": the weights' dtype must be f32, f16 or bf16 (got " +
                dtype_name(o.dtype) + ")");
  }
  if (!is_float(o.cache_dtype)) {
    throw Error(std::string(who) + ": the KV cache's dtype must be f32, f16 or bf16 (got " +
                dtype_name(o.cache_dtype) + ")");
  }
  RunnerShape r;
  r.batch = o.batch;
  r.context = o.max_context > 0 ? o.max_context
                                : std::min<int64_t>(config.max_position_embeddings, 2048);
  r.block = o.prefill_block > 0 ? o.prefill_block : std::min<int64_t>(128, r.context);
  // Eight steps make the host's part of a step (submission, the GPU's start, the fence) an
  // eighth, and text still streams every few milliseconds.
  const int64_t chain = o.decode_chain > 0 ? o.decode_chain : 8;
  r.chain = chain > 1 ? chain : 0;
  if (r.block > r.context) {
    throw Error(std::string(who) + ": a prefill block of " + std::to_string(r.block) +
                " tokens exceeds the context of " + std::to_string(r.context));
  }
  return r;
}

std::string_view step_program(const char* who, int64_t batch, int64_t prefill_block,
                              size_t tokens) {
  const int64_t block = static_cast<int64_t>(tokens) / batch;
  if (static_cast<int64_t>(tokens) != block * batch || (block != 1 && block != prefill_block)) {
    throw Error(std::string(who) + ": a call of " + std::to_string(tokens) + " tokens for " +
                std::to_string(batch) + " sequences (the prefill block is " +
                std::to_string(prefill_block) + " tokens per sequence, decoding takes 1)");
  }
  return block == 1 ? "decode" : "prefill";
}

namespace {
// The inputs every step of a call shares.
void set_step_inputs(Session& s, std::string_view program, int64_t batch,
                     std::span<const int32_t> tokens, std::span<const int32_t> last,
                     const SamplingOptions& sampling) {
  const int64_t block = static_cast<int64_t>(tokens.size()) / batch;
  s.set(program, "input_ids", Array({batch, block}, DType::i32, as_doubles(tokens)));
  s.set(program, "last", Array({batch}, DType::i32, as_doubles(last)));
  s.set(program, "temperature", Array::scalar(sampling.temperature));
  s.set(program, "top_k", Array::scalar(static_cast<double>(sampling.top_k), DType::i32));
  s.set(program, "top_p", Array::scalar(sampling.top_p));
  // The u32 inputs hold the low 32 bits: seeds and counters past them repeat streams.
  s.set(program, "seed", Array::scalar(static_cast<double>(sampling.seed & 0xffffffffu), DType::u32));
}

std::vector<int32_t> as_tokens(const Array& a) {
  std::vector<int32_t> out(a.data.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(a.data[i]);
  return out;
}
}  // namespace

ProgramChain decode_chain(int64_t runs) {
  ProgramChain c;
  c.runs = runs;
  c.per_run = {"positions", "step"};
  c.feed = {{"next", "input_ids"}};
  c.collect = {"next"};
  return c;
}

std::vector<int32_t> run_token_chain(Session& s, std::string_view program, int64_t batch,
                                     int64_t runs, std::span<const int32_t> tokens,
                                     std::span<const int32_t> positions,
                                     std::span<const int32_t> last, const SamplingOptions& sampling,
                                     uint64_t counter) {
  set_step_inputs(s, program, batch, tokens, last, sampling);
  std::vector<double> pos(static_cast<size_t>(runs * batch)), step(static_cast<size_t>(runs));
  for (int64_t r = 0; r < runs; ++r) {
    for (int64_t b = 0; b < batch; ++b) pos[r * batch + b] = positions[b] + r;
    step[r] = static_cast<double>((counter + static_cast<uint64_t>(r)) & 0xffffffffu);
  }
  s.set_runs(program, "positions", Array({runs, batch, 1}, DType::i32, std::move(pos)));
  s.set_runs(program, "step", Array({runs}, DType::u32, std::move(step)));
  s.step_chain(program);
  return as_tokens(s.get_runs(program, "next"));
}

std::vector<int32_t> run_token_step(Session& s, std::string_view program, int64_t batch,
                                    std::span<const int32_t> tokens,
                                    std::span<const int32_t> positions,
                                    std::span<const int32_t> last, const SamplingOptions& sampling,
                                    uint64_t counter) {
  const int64_t block = static_cast<int64_t>(tokens.size()) / batch;
  set_step_inputs(s, program, batch, tokens, last, sampling);
  s.set(program, "positions", Array({batch, block}, DType::i32, as_doubles(positions)));
  s.set(program, "step", Array::scalar(static_cast<double>(counter & 0xffffffffu), DType::u32));
  s.step(program);
  return as_tokens(s.get(program, "next"));
}

}  // namespace mn::gen
