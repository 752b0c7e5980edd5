// LmRunner: a Hugging Face causal LM as a TokenModel on a device.
#include <algorithm>
#include <chrono>

#include <meganeura/causal_lm.h>
#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

namespace mn {

namespace {

class SessionLmRunner : public LmRunner {
 public:
  SessionLmRunner(const HfModel& model, const LmRunnerOptions& o) : config_(model.config) {
    const auto t0 = std::chrono::steady_clock::now();
    batch_ = o.batch;
    context_ = o.max_context > 0 ? o.max_context
                                 : std::min<int64_t>(model.config.max_position_embeddings, 2048);
    block_ = o.prefill_block > 0 ? o.prefill_block : std::min<int64_t>(128, context_);
    if (batch_ < 1) throw Error("LmRunner: batch must be positive");
    if (block_ > context_) {
      throw Error("LmRunner: a prefill block of " + std::to_string(block_) +
                  " tokens exceeds the context of " + std::to_string(context_));
    }
    SessionOptions so;
    so.device = o.device;
    // Two programs over one set of weights and caches; a step reads back only the sampled ids.
    std::vector<CausalLm> graphs;
    std::vector<SessionProgram> programs;
    for (const auto& [name, block] : {std::pair{"prefill", block_}, std::pair{"decode", int64_t{1}}}) {
      LmStepOptions s;
      s.batch = batch_;
      s.block = block;
      s.max_context = context_;
      s.dtype = o.dtype;
      graphs.push_back(build_lm_step(model.config, s));
      programs.push_back({name, graphs.back().graph.get(), std::vector<std::string>{"next"}});
    }
    session_ = build_session(programs, so);
    load_weights(*session_, model);
    build_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  int64_t batch() const override { return batch_; }
  int64_t max_context() const override { return context_; }
  int64_t prefill_block() const override { return block_; }
  const std::string& device_name() const override { return session_->device_name(); }
  double build_seconds() const override { return build_seconds_; }
  MemorySummary memory() const override { return session_->memory(); }

  std::vector<int32_t> run(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                           std::span<const int32_t> last, const SamplingOptions& sampling,
                           uint64_t counter) override {
    const int64_t block = static_cast<int64_t>(tokens.size()) / batch_;
    if (block != 1 && block != block_) {
      throw Error("LmRunner: a call of " + std::to_string(block) + " tokens per sequence (the " +
                  "prefill block is " + std::to_string(block_) + ", decoding takes 1)");
    }
    const std::string_view program = block == 1 ? "decode" : "prefill";
    Session& s = *session_;
    s.set(program, "input_ids", Array({batch_, block}, DType::i32, ints(tokens)));
    s.set(program, "positions", Array({batch_, block}, DType::i32, ints(positions)));
    s.set(program, "last", Array({batch_}, DType::i32, ints(last)));
    s.set(program, "temperature", Array::scalar(sampling.temperature));
    s.set(program, "top_k", Array::scalar(static_cast<double>(sampling.top_k), DType::i32));
    s.set(program, "top_p", Array::scalar(sampling.top_p));
    // The u32 inputs hold the low 32 bits: seeds and counters past them repeat streams.
    s.set(program, "seed", Array::scalar(static_cast<double>(sampling.seed & 0xffffffffu), DType::u32));
    s.set(program, "step", Array::scalar(static_cast<double>(counter & 0xffffffffu), DType::u32));
    s.step(program);
    const Array next = s.get(program, "next");
    std::vector<int32_t> out(next.data.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(next.data[i]);
    return out;
  }

 private:
  static std::vector<double> ints(std::span<const int32_t> v) { return {v.begin(), v.end()}; }

  LmConfig config_;
  int64_t batch_ = 1, context_ = 0, block_ = 0;
  std::unique_ptr<Session> session_;
  double build_seconds_ = 0;
};

}  // namespace

std::unique_ptr<LmRunner> LmRunner::create(const HfModel& model, const LmRunnerOptions& options) {
  return std::make_unique<SessionLmRunner>(model, options);
}

}  // namespace mn
