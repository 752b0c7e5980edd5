// Whisper's audio encoder as transformers writes it (modeling_whisper.py: WhisperEncoder,
// WhisperEncoderLayer, WhisperAttention without a cache), registered in its order so that the
// state_dict keys and their order are its own.
#include <cmath>
#include <string>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/speech.h>

#include "models/projected_attention.h"

namespace mn::speech {

namespace {

class WhisperEncoderLayer : public nn::Module {
 public:
  explicit WhisperEncoderLayer(const WhisperEncoderConfig& c) : Module("WhisperEncoderLayer") {
    attn_ = register_module("self_attn", std::make_shared<models::ProjectedAttention>(
                                             "WhisperAttention", c.d_model, c.heads, false));
    attn_norm_ = register_module("self_attn_layer_norm",
                                 std::make_shared<nn::LayerNorm>(Shape{c.d_model}));
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(c.d_model, c.ffn_dim));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(c.ffn_dim, c.d_model));
    final_norm_ =
        register_module("final_layer_norm", std::make_shared<nn::LayerNorm>(Shape{c.d_model}));
  }
  Tensor forward(Tensor x) override {
    x = x + attn_->forward(attn_norm_->forward(x));
    return x + fc2_->forward(gelu(fc1_->forward(final_norm_->forward(x))));
  }

 private:
  std::shared_ptr<models::ProjectedAttention> attn_;
  std::shared_ptr<nn::LayerNorm> attn_norm_, final_norm_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

// embed_positions: transformers' nn.Embedding holding the sinusoids, frozen; here a buffer
// "weight" the encoder adds whole.
class SinusoidalPositions : public nn::Module {
 public:
  SinusoidalPositions(int64_t positions, int64_t d) : Module("Embedding") {
    register_buffer("weight", {positions, d}, Init::sinusoids());
  }
  Tensor forward(Tensor x) override { return x + tensor(x.graph(), "weight"); }
};

class WhisperEncoder : public nn::Module {
 public:
  explicit WhisperEncoder(const WhisperEncoderConfig& c) : Module("WhisperEncoder"), config_(c) {
    for (auto [v, what] : {std::pair{c.num_mel_bins, "num_mel_bins"}, {c.d_model, "d_model"},
                           {c.layers, "layers"}, {c.heads, "heads"}, {c.ffn_dim, "ffn_dim"},
                           {c.max_source_positions, "max_source_positions"}}) {
      if (v < 1) throw Error("WhisperEncoder: " + std::string(what) + " is " + std::to_string(v));
    }
    if (c.d_model % c.heads != 0 || c.d_model % 2 != 0 || c.d_model < 4) {
      throw Error("WhisperEncoder: d_model " + std::to_string(c.d_model) +
                  " must be even, at least 4 and a multiple of heads " + std::to_string(c.heads));
    }
    conv1_ = register_module(
        "conv1", std::make_shared<nn::Conv1d>(c.num_mel_bins, c.d_model, 3,
                                              nn::Conv1dConfig{.padding = 1}));
    conv2_ = register_module(
        "conv2", std::make_shared<nn::Conv1d>(c.d_model, c.d_model, 3,
                                              nn::Conv1dConfig{.stride = 2, .padding = 1}));
    positions_ = register_module(
        "embed_positions", std::make_shared<SinusoidalPositions>(c.max_source_positions, c.d_model));
    layers_ = register_module("layers", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.layers; ++i) {
      layers_->push_back(std::make_shared<WhisperEncoderLayer>(c));
    }
    norm_ = register_module("layer_norm", std::make_shared<nn::LayerNorm>(Shape{c.d_model}));
  }
  Tensor forward(Tensor x) override {
    const int64_t frames = 2 * config_.max_source_positions;
    if (x.rank() != 3 || x.dim(1) != config_.num_mel_bins || x.dim(2) != frames) {
      throw ShapeError(where() + ": expected features [N, " + std::to_string(config_.num_mel_bins) +
                       ", " + std::to_string(frames) + "] (" + std::to_string(frames) +
                       " frames: twice max_source_positions), got " + x.type().str());
    }
    Tensor h = gelu(conv2_->forward(gelu(conv1_->forward(x))));
    h = positions_->forward(permute(h, {0, 2, 1}));
    for (size_t i = 0; i < layers_->size(); ++i) h = (*layers_)[i]->forward(h);
    return norm_->forward(h);
  }

 private:
  WhisperEncoderConfig config_;
  std::shared_ptr<nn::Conv1d> conv1_, conv2_;
  std::shared_ptr<SinusoidalPositions> positions_;
  std::shared_ptr<nn::ModuleList> layers_;
  std::shared_ptr<nn::LayerNorm> norm_;
};

}  // namespace

WhisperEncoderConfig whisper_encoder_config(const std::string& size) {
  // (d_model, layers, heads, ffn) of openai/whisper-<size>; 80 mel bins, 1500 positions.
  struct Size {
    const char* name;
    int64_t d, layers, heads;
  };
  for (const Size& s : {Size{"tiny", 384, 4, 6}, Size{"base", 512, 6, 8}, Size{"small", 768, 12, 12},
                        Size{"medium", 1024, 24, 16}}) {
    if (size == s.name) {
      return {.d_model = s.d, .layers = s.layers, .heads = s.heads, .ffn_dim = 4 * s.d};
    }
  }
  throw Error("whisper_encoder_config: unknown size '" + size +
              "' (expected tiny, base, small or medium)");
}

std::shared_ptr<nn::Module> whisper_encoder(const WhisperEncoderConfig& config) {
  return std::make_shared<WhisperEncoder>(config);
}

}  // namespace mn::speech
