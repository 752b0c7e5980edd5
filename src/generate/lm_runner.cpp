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
    for (int64_t block : {block_, int64_t{1}}) {
      LmStepOptions s;
      s.batch = batch_;
      s.block = block;
      s.max_context = context_;
      s.dtype = o.dtype;
      CausalLm lm = build_lm_step(model.config, s);
      programs_.push_back(build_session(*lm.graph, so));
      load_weights(*programs_.back(), model);
    }
    for (const std::string& name : programs_[0]->state_names()) cache_names_.push_back(name);
    build_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  int64_t batch() const override { return batch_; }
  int64_t max_context() const override { return context_; }
  int64_t prefill_block() const override { return block_; }
  const std::string& device_name() const override { return programs_[0]->device_name(); }
  double build_seconds() const override { return build_seconds_; }

  std::vector<int32_t> run(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                           std::span<const int32_t> last, const SamplingOptions& sampling,
                           uint64_t) override {
    if (sampling.temperature != 0.0) {
      throw Error("LmRunner: only greedy decoding (temperature 0) is available");
    }
    const int64_t block = static_cast<int64_t>(tokens.size()) / batch_;
    const size_t p = block == 1 ? 1 : 0;
    if (block != (p == 1 ? 1 : block_)) {
      throw Error("LmRunner: a call of " + std::to_string(block) + " tokens per sequence");
    }
    sync_cache(p);
    Session& s = *programs_[p];
    s.set("input_ids", tokens);
    s.set("positions", positions);
    s.set("last", last);
    s.step();
    const Array next = s.get("next");
    std::vector<int32_t> out(next.data.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(next.data[i]);
    return out;
  }

 private:
  // The two programs keep separate caches: bring the one about to run up to date.
  void sync_cache(size_t p) {
    if (current_ == p) return;
    for (const std::string& name : cache_names_) programs_[p]->set(name, programs_[current_]->get(name));
    current_ = p;
  }

  LmConfig config_;
  int64_t batch_ = 1, context_ = 0, block_ = 0;
  std::vector<std::unique_ptr<Session>> programs_;
  std::vector<std::string> cache_names_;
  size_t current_ = 0;
  double build_seconds_ = 0;
};

}  // namespace

std::unique_ptr<LmRunner> LmRunner::create(const HfModel& model, const LmRunnerOptions& options) {
  return std::make_unique<SessionLmRunner>(model, options);
}

}  // namespace mn
