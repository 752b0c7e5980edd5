// LmRunner: a Hugging Face causal LM as a TokenModel on a device.
#include <algorithm>

#include <meganeura/causal_lm.h>
#include <meganeura/finetune.h>
#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

#include "generate/token_step.h"

namespace mn {

namespace {

class SessionLmRunner : public LmRunner {
 public:
  SessionLmRunner(const HfModel& model, const LmRunnerOptions& o) {
    gen::Laps laps;
    const gen::RunnerShape shape = gen::runner_shape("LmRunner", o, model.config);
    batch_ = shape.batch;
    context_ = shape.context;
    block_ = shape.block;
    chain_ = shape.chain;
    SessionOptions so;
    so.device = o.device;
    so.profile = o.profile;
    so.time_steps = o.time_steps;
    so.precision = o.precision;
    // Every weight comes from the model's files (load_weights checks that none is missing).
    for (const ParameterSpec& p : lm_parameters(model.config)) so.preset.insert(p.name);
    // Two programs over one set of weights and caches; a step reads back only the sampled ids.
    std::vector<CausalLm> graphs;
    std::vector<SessionProgram> programs;
    for (const auto& [name, block] : {std::pair{"prefill", block_}, std::pair{"decode", int64_t{1}}}) {
      LmStepOptions s;
      s.batch = batch_;
      s.block = block;
      s.max_context = context_;
      s.dtype = o.dtype;
      s.cache_dtype = o.cache_dtype;
      graphs.push_back(build_lm_step(model.config, s));
      programs.push_back({name, graphs.back().graph.get(), std::vector<std::string>{"next"}});
      if (block == 1 && chain_ > 0) programs.back().chain = gen::decode_chain(chain_);
    }
    times_.graphs = laps.lap();
    session_ = build_session(programs, so);
    times_.session = laps.lap();
    load_weights(*session_, model);
    if (!o.adapter.empty()) merge_lora_adapter(*session_, model.config, o.adapter);
    times_.weights = laps.lap();
  }

  int64_t batch() const override { return batch_; }
  int64_t max_context() const override { return context_; }
  int64_t prefill_block() const override { return block_; }
  const std::string& device_name() const override { return session_->device_name(); }
  const BuildTimes& build_times() const override { return times_; }
  MemorySummary memory() const override { return session_->memory(); }
  std::vector<KernelTime> profile(std::string_view program) const override {
    return session_->profile(program);
  }
  double step_gpu_ms(std::string_view program) const override {
    return session_->step_gpu_ms(program);
  }
  double chain_gpu_ms() const override {
    return chain_ > 0 ? session_->chain_gpu_ms("decode") : 0.0;
  }
  int64_t chain_length() const override { return chain_; }

  std::vector<int32_t> run(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                           std::span<const int32_t> last, const SamplingOptions& sampling,
                           uint64_t counter) override {
    const std::string_view program = gen::step_program("LmRunner", batch_, block_, tokens.size());
    return gen::run_token_step(*session_, program, batch_, tokens, positions, last, sampling,
                               counter);
  }

  std::vector<int32_t> run_chain(std::span<const int32_t> tokens,
                                 std::span<const int32_t> positions, std::span<const int32_t> last,
                                 const SamplingOptions& sampling, uint64_t counter) override {
    if (chain_length() == 0 || static_cast<int64_t>(tokens.size()) != batch_) {
      return TokenModel::run_chain(tokens, positions, last, sampling, counter);  // the error
    }
    return gen::run_token_chain(*session_, "decode", batch_, chain_, tokens, positions, last,
                                sampling, counter);
  }

 private:
  int64_t batch_ = 1, context_ = 0, block_ = 0, chain_ = 0;
  std::unique_ptr<Session> session_;
  BuildTimes times_;
};

}  // namespace

std::unique_ptr<LmRunner> LmRunner::create(const HfModel& model, const LmRunnerOptions& options) {
  return std::make_unique<SessionLmRunner>(model, options);
}

}  // namespace mn
