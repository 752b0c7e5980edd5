// VlmRunner: SmolVLM as a TokenModel on a device. The vision program writes each frame's
// features into rows of the state "image_features" (the sequence's rows, then scratch rows at
// the end for the padding frames of a partial call); the prefill reads them back by row, one
// row per <image> token, in the order the tokens come.
#include <algorithm>

#include <meganeura/causal_lm.h>
#include <meganeura/error.h>
#include <meganeura/session.h>
#include <meganeura/vlm.h>

#include "generate/token_step.h"
#include "models/image_splice.h"

namespace mn {

namespace {

constexpr const char* kFeatures = "image_features";

// Frames of the largest image the processor makes: rows x cols tiles and the global frame.
int64_t largest_split(const SmolVlmImageProcessor& p) {
  if (!p.do_image_splitting) return 1;
  const int64_t side = (p.longest_edge + p.max_image_size - 1) / p.max_image_size;
  return side * side + (side > 1 ? 1 : 0);
}

class SessionVlmRunner : public VlmRunner {
 public:
  SessionVlmRunner(const SmolVlmModel& model, const VlmRunnerOptions& o) : config_(model.config) {
    gen::Laps laps;
    const gen::RunnerShape shape = gen::runner_shape("VlmRunner", o.lm, config_.text);
    batch_ = shape.batch;
    context_ = shape.context;
    block_ = shape.block;
    chain_ = shape.chain;
    if (o.frames_per_call < 1) {
      throw Error("VlmRunner: frames_per_call must be at least 1 (got " +
                  std::to_string(o.frames_per_call) + ")");
    }
    if (o.max_image_tokens < 0) {
      throw Error("VlmRunner: max_image_tokens must not be negative (got " +
                  std::to_string(o.max_image_tokens) + ")");
    }
    if (!o.lm.adapter.empty()) throw Error("VlmRunner: LoRA adapters are not supported");
    seq_ = config_.image_seq_len();
    frames_per_call_ = o.frames_per_call;
    per_sequence_ = o.max_image_tokens > 0 ? o.max_image_tokens : largest_split(model.processor) * seq_;
    scratch_ = batch_ * per_sequence_;
    capacity_ = scratch_ + frames_per_call_ * seq_;
    encoded_.assign(static_cast<size_t>(batch_), 0);
    used_.assign(static_cast<size_t>(batch_), 0);

    SessionOptions so;
    so.device = o.lm.device;
    so.profile = o.lm.profile;
    so.time_steps = o.lm.time_steps;
    so.precision = o.lm.precision;
    for (const ParameterSpec& p : smolvlm_parameters(config_)) so.preset.insert(p.name);
    Graph vision = vision_graph();
    CausalLm prefill = step_graph(o.lm, block_, true);
    CausalLm decode = step_graph(o.lm, 1, false);
    times_.graphs = laps.lap();
    session_ = build_session({{"vision", &vision, std::vector<std::string>{}},
                              {"prefill", prefill.graph.get(), std::vector<std::string>{"next"}},
                              {"decode", decode.graph.get(), std::vector<std::string>{"next"},
                               chain_ > 0 ? gen::decode_chain(chain_) : ProgramChain{}}},
                             so);
    times_.session = laps.lap();
    load_weights(*session_, model.files);
    times_.weights = laps.lap();
  }

  int64_t batch() const override { return batch_; }
  int64_t max_context() const override { return context_; }
  int64_t prefill_block() const override { return block_; }
  const std::string& device_name() const override { return session_->device_name(); }
  const LmRunner::BuildTimes& build_times() const override { return times_; }
  MemorySummary memory() const override { return session_->memory(); }
  double step_gpu_ms(std::string_view program) const override {
    return session_->step_gpu_ms(program);
  }

  std::vector<KernelTime> profile(std::string_view program) const override {
    return session_->profile(program);
  }

  Array logits(std::string_view program) const override {
    if (program != "prefill" && program != "decode") {
      throw Error("VlmRunner::logits: no program '" + std::string(program) +
                  "' (prefill or decode)");
    }
    return session_->get(program, "logits");
  }

  void set_image(int64_t index, const SmolVlmImage& image) override {
    if (index < 0 || index >= batch_) {
      throw Error("VlmRunner::set_image: sequence " + std::to_string(index) + " of a batch of " +
                  std::to_string(batch_));
    }
    const Shape& s = image.pixel_values.shape;
    const int64_t side = config_.vision.image_size, channels = config_.vision.num_channels;
    if (s.size() != 4 || s[0] < 1 || s[1] != channels || s[2] != side || s[3] != side) {
      throw ShapeError("VlmRunner::set_image: expected frames [F, " + std::to_string(channels) +
                       ", " + std::to_string(side) + ", " + std::to_string(side) +
                       "] (the model's image_size), got " + shape_str(s));
    }
    const int64_t frames = s[0];
    if (frames * seq_ > per_sequence_) {
      throw Error("VlmRunner::set_image: " + std::to_string(frames) + " frames make " +
                  std::to_string(frames * seq_) + " image tokens; a sequence holds " +
                  std::to_string(per_sequence_) + " (VlmRunnerOptions::max_image_tokens)");
    }
    const int64_t frame_values = channels * side * side;
    // The frames as f32 bytes, uploaded as they are (a 2048² image is 17 frames, 53 MB).
    std::vector<float> pixels(static_cast<size_t>(frames_per_call_ * frame_values));
    for (int64_t first = 0; first < frames; first += frames_per_call_) {
      Array rows({frames_per_call_ * seq_}, DType::i32);
      for (int64_t i = 0; i < frames_per_call_; ++i) {
        const int64_t f = first + i;
        float* to = pixels.data() + i * frame_values;
        if (f < frames) {
          const double* from = image.pixel_values.data.data() + f * frame_values;
          for (int64_t k = 0; k < frame_values; ++k) to[k] = static_cast<float>(from[k]);
        } else {
          std::fill_n(to, frame_values, 0.0f);
        }
        for (int64_t j = 0; j < seq_; ++j) {
          const int64_t row = f < frames ? index * per_sequence_ + f * seq_ + j : scratch_ + i * seq_ + j;
          rows.data[static_cast<size_t>(i * seq_ + j)] = static_cast<double>(row);
        }
      }
      session_->set_raw("vision", "pixel_values", DType::f32, std::as_bytes(std::span(pixels)));
      session_->set("vision", "rows", rows);
      session_->step("vision");
    }
    encoded_[static_cast<size_t>(index)] = frames * seq_;
    used_[static_cast<size_t>(index)] = 0;
  }

  std::vector<int32_t> run(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                           std::span<const int32_t> last, const SamplingOptions& sampling,
                           uint64_t counter) override {
    const std::string_view program = gen::step_program("VlmRunner", batch_, block_, tokens.size());
    if (program == "prefill") session_->set("prefill", "image_rows", image_rows(tokens));
    return gen::run_token_step(*session_, program, batch_, tokens, positions, last, sampling,
                               counter);
  }

  int64_t chain_length() const override { return chain_; }
  std::vector<int32_t> run_chain(std::span<const int32_t> tokens,
                                 std::span<const int32_t> positions, std::span<const int32_t> last,
                                 const SamplingOptions& sampling, uint64_t counter) override {
    if (chain_ == 0 || static_cast<int64_t>(tokens.size()) != batch_) {
      return TokenModel::run_chain(tokens, positions, last, sampling, counter);  // the error
    }
    return gen::run_token_chain(*session_, "decode", batch_, chain_, tokens, positions, last,
                                sampling, counter);
  }

 private:
  // The features row of each token of a prefill block: the next unused row of its sequence's
  // image for an <image> token, a scratch row (never read: the token's own embedding is kept)
  // for any other.
  Array image_rows(std::span<const int32_t> tokens) {
    Array rows({batch_, block_}, DType::i32);
    for (int64_t b = 0; b < batch_; ++b) {
      int64_t& used = used_[static_cast<size_t>(b)];
      for (int64_t i = 0; i < block_; ++i) {
        const size_t at = static_cast<size_t>(b * block_ + i);
        double row = static_cast<double>(scratch_);
        if (tokens[at] == config_.image_token_id) {
          if (used >= encoded_[static_cast<size_t>(b)]) {
            throw Error("VlmRunner: sequence " + std::to_string(b) + " has more <image> tokens " +
                        "than the " + std::to_string(encoded_[static_cast<size_t>(b)]) +
                        " image features set for it (set_image)");
          }
          row = static_cast<double>(b * per_sequence_ + used++);
        }
        rows.data[at] = row;
      }
    }
    return rows;
  }

  Graph vision_graph() const {
    Graph g;
    const SmolVlmVisionConfig& v = config_.vision;
    Tensor pixels = g.input("pixel_values", {frames_per_call_, v.num_channels, v.image_size, v.image_size});
    Tensor rows = g.input("rows", {frames_per_call_ * seq_}, DType::i32);
    Tensor features = smolvlm_image_features(config_, pixels);
    features = reshape(features, {frames_per_call_ * seq_, config_.text.hidden_size});
    Tensor state = g.state(kFeatures, {capacity_, config_.text.hidden_size});
    Tensor written = cache_write(state, features, rows);
    g.assign(state, written);
    g.output("features", written);
    return g;
  }

  CausalLm step_graph(const LmRunnerOptions& o, int64_t block, bool with_images) const {
    LmStepOptions s;
    s.batch = batch_;
    s.block = block;
    s.max_context = context_;
    s.dtype = o.dtype;
    s.cache_dtype = o.cache_dtype;
    s.prefix = "model.text_model.";
    if (with_images) {
      const int64_t hidden = config_.text.hidden_size, capacity = capacity_;
      const int64_t image_token = config_.image_token_id, batch = batch_;
      s.splice = [=](Graph& g, Tensor ids, Tensor embeddings) {
        Tensor rows = g.input("image_rows", {batch, block}, DType::i32);
        Tensor features = g.state(kFeatures, {capacity, hidden});
        return models::image_splice(features, rows, image_token)(g, ids, embeddings);
      };
    }
    return build_lm_step(config_.text, s);
  }

  SmolVlmConfig config_;
  int64_t batch_ = 1, context_ = 0, block_ = 0, chain_ = 0;
  int64_t seq_ = 0, frames_per_call_ = 1, per_sequence_ = 0, scratch_ = 0, capacity_ = 0;
  std::vector<int64_t> encoded_, used_;  // image tokens set and consumed, per sequence
  std::unique_ptr<Session> session_;
  LmRunner::BuildTimes times_;
};

}  // namespace

std::unique_ptr<VlmRunner> VlmRunner::create(const SmolVlmModel& model, const VlmRunnerOptions& options) {
  return std::make_unique<SessionVlmRunner>(model, options);
}

}  // namespace mn
