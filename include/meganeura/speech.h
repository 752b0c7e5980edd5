#pragma once
// Speech models in Hugging Face transformers' layout: Whisper's encoder (WhisperEncoder), whose
// parameter names are its state_dict keys (conv1.weight, embed_positions.weight,
// layers.0.self_attn.k_proj.weight, layer_norm.bias ...), so its weights load by name
// (nn::load_state_dict; a WhisperModel checkpoint's keys carry the prefix "model.encoder.").
// Its input is log_mel_spectrogram's features (meganeura/audio.h).
#include <cstdint>
#include <memory>
#include <string>

#include <meganeura/nn.h>

namespace mn::speech {

struct WhisperEncoderConfig {
  int64_t num_mel_bins = 80;
  int64_t d_model = 384;
  int64_t layers = 4;
  int64_t heads = 6;
  int64_t ffn_dim = 1536;
  int64_t max_source_positions = 1500;  // the input has twice as many frames
};

// openai/whisper-{tiny, base, small, medium}'s encoders; mn::Error naming the sizes otherwise.
WhisperEncoderConfig whisper_encoder_config(const std::string& size);

// WhisperEncoder: two Conv1d (kernel 3, the second of stride 2) with GELU, sinusoidal positions
// (the buffer embed_positions.weight: not trained, as there), pre-norm blocks of self-attention
// (q and v projections with bias, k without) and a GELU MLP, a final LayerNorm. forward takes
// [N, num_mel_bins, 2·max_source_positions] features and returns [N, max_source_positions,
// d_model]; another length is a ShapeError, as in transformers. Initialization: PyTorch's
// defaults for the layers (normal init of transformers' _init_weights is not reproduced).
std::shared_ptr<nn::Module> whisper_encoder(const WhisperEncoderConfig& config);

}  // namespace mn::speech
