#pragma once
// Vision-language models in Hugging Face's layout: SmolVLM (SmolVLMForConditionalGeneration,
// the architecture of SmolVLM2; Idefics3ForConditionalGeneration, SmolVLM's first version, has
// the same parameters): a SigLIP-style vision encoder over square frames, the pixel-shuffle
// connector, and a Llama decoder that reads the frames' features in place of the prompt's
// <image> tokens. Parameter names are transformers' ("model.vision_model.encoder.layers.0.
// self_attn.q_proj.weight", "model.connector.modality_projection.proj.weight",
// "model.text_model.layers.0.mlp.up_proj.weight", "lm_head.weight"), so a model directory loads
// by name.
//
// Generation runs on the language-model path (meganeura/generate.h): a VlmRunner is a TokenModel
// whose prefill takes each <image> token's embedding from the encoded frames.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <meganeura/causal_lm.h>
#include <meganeura/generate.h>
#include <meganeura/hf.h>
#include <meganeura/image.h>
#include <meganeura/ops.h>

namespace mn {

// vision_config (transformers' SmolVLMVisionConfig defaults where a field is absent).
struct SmolVlmVisionConfig {
  int64_t hidden_size = 1152;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 16;
  int64_t num_channels = 3;
  int64_t image_size = 224;  // frames are image_size x image_size
  int64_t patch_size = 32;
  double layer_norm_eps = 1e-6;
  GeluApprox hidden_act = GeluApprox::tanh;  // "gelu_pytorch_tanh"; "gelu" is exact

  int64_t patches_per_side() const { return image_size / patch_size; }
};

struct SmolVlmConfig {
  std::string architecture;  // as config.json names it
  SmolVlmVisionConfig vision;
  LmConfig text;  // text_config: a Llama decoder; tie_word_embeddings as the model ties
  int64_t scale_factor = 2;  // the connector's pixel shuffle
  int64_t image_token_id = 128257;
  std::string json_text;

  // Tokens per frame: (patches per side / scale_factor)².
  int64_t image_seq_len() const;
};

// config.json; FormatError naming the file and field for anything missing, malformed or
// unsupported (another text model type, sizes that do not divide).
SmolVlmConfig parse_smolvlm_config(const std::string& json_text,
                                   const std::string& file = "config.json");
// Whether a model directory's config.json names a SmolVLM architecture.
bool is_smolvlm_dir(const std::filesystem::path& dir);

// preprocessor_config.json of SmolVLMImageProcessor (its defaults where a field is absent).
struct SmolVlmImageProcessor {
  bool do_resize = true;
  int64_t longest_edge = 4 * 364;  // size.longest_edge: the image is first resized to it
  bool do_image_splitting = true;
  int64_t max_image_size = 364;  // max_image_size.longest_edge: the frame size
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.5, 0.5, 0.5};
  std::array<double, 3> image_std{0.5, 0.5, 0.5};
  Resample resample = Resample::lanczos;
};
SmolVlmImageProcessor parse_smolvlm_image_processor(
    const std::string& json_text, const std::string& file = "preprocessor_config.json");

// One image as the processor gives it to the model: rows x cols tiles of the image resized to
// a multiple of the frame size, then the whole image resized to one frame (rows = cols = 0 when
// it was not split: one frame).
struct SmolVlmImage {
  Array pixel_values;  // f32 [frames, 3, frame, frame]
  int64_t rows = 0, cols = 0;
  int64_t frames() const { return pixel_values.shape.empty() ? 0 : pixel_values.shape[0]; }
};

// SmolVLMImageProcessor.preprocess on one RGB image: resize (longest edge, LANCZOS), resize to
// multiples of the frame size, split, rescale, normalize. mn::Error when the image is empty or
// the processor's sizes are not positive.
SmolVlmImage smolvlm_preprocess(const Image& image, const SmolVlmImageProcessor& processor);

// What SmolVLMProcessor puts in place of an <image> of the prompt: per tile
// "<fake_token_around_image><row_R_col_C>" and image_seq_len "<image>", a newline after each row,
// then "\n<fake_token_around_image><global-img>", the global frame's "<image>" tokens and
// "<fake_token_around_image>" (without the tiles and the leading newline for an unsplit image).
std::string smolvlm_image_prompt(const SmolVlmImage& image, int64_t image_seq_len);
// SmolVLM2's chat template for one user turn, the image first when there is one:
// "<|im_start|>User:<image>TEXT<end_of_utterance>\nAssistant:" (": " after "User" without an
// image), after "System: SYSTEM<end_of_utterance>\n" when a system message is given.
std::string smolvlm_chat_prompt(const std::string& text, bool with_image,
                                const std::string& system = {});
// The prompt with each "<image>" replaced by smolvlm_image_prompt of the next image. mn::Error
// when the counts of placeholders and images differ.
std::string expand_image_tokens(const std::string& prompt, const std::vector<SmolVlmImage>& images,
                                int64_t image_seq_len);

// Every parameter of the model, in transformers' order (vision, connector, text, head).
std::vector<ParameterSpec> smolvlm_parameters(const SmolVlmConfig& config);

// A model directory: config.json, generation_config.json and preprocessor_config.json when
// present, the safetensors headers (one file or shards) checked against smolvlm_parameters.
struct SmolVlmModel {
  SmolVlmConfig config;
  SmolVlmImageProcessor processor;
  HfModel files;  // dir, generation config and the tensors; files.config is config.text
};
SmolVlmModel load_smolvlm(const std::filesystem::path& dir);

// The vision tower and connector on frames [F, 3, S, S] (S = vision.image_size): features
// [F, image_seq_len, text hidden_size]. Parameters in f32 under their transformers names.
// ShapeError for other pixel shapes.
Tensor smolvlm_image_features(const SmolVlmConfig& config, Tensor pixel_values);

// The training graph: frames and tokens in, the decoder's loss out, every parameter (vision,
// connector, decoder) differentiable. Inputs "pixel_values" (f32 [frames, 3, S, S]: the frames
// of every sequence's images, in order), "input_ids", "image_rows" (i32 [batch, sequence]: the
// features row each <image> token takes, from smolvlm_image_rows) and "labels" (i32 [batch,
// sequence], -100 ignored, shifted inside as transformers does); outputs "logits" and "loss".
struct SmolVlmTrainingOptions {
  int64_t batch = 1;
  int64_t sequence = 128;
  int64_t frames = 1;
  DType dtype = DType::f32;  // storage of the decoder's parameters
};
CausalLm build_smolvlm_training(const SmolVlmConfig& config, const SmolVlmTrainingOptions& options);

// "image_rows" for input_ids [batch, sequence]: sequence b's <image> tokens take, in order, the
// features of its frames_per_sequence[b] frames, which follow those of the sequences before it.
// mn::Error naming the sequence when its <image> tokens are not its frames' tokens.
Array smolvlm_image_rows(const Array& input_ids, const SmolVlmConfig& config,
                         std::span<const int64_t> frames_per_sequence);

struct VlmRunnerOptions {
  LmRunnerOptions lm;  // batch, context, prefill block, storage dtype of the decoder, device
  int64_t frames_per_call = 1;  // frames the vision program encodes per submission
  // Image tokens each sequence can hold; 0: one image of the processor's largest split.
  int64_t max_image_tokens = 0;
};

// A SmolVLM on a device: one session of three programs over the same weights: "vision"
// (frames -> features, kept on the device), "prefill" and "decode" (the decoder's KV-cache
// steps; the prefill takes each <image> token's embedding from the features of its sequence's
// image, in order). Text-only prompts work as with LmRunner.
class VlmRunner : public TokenModel {
 public:
  static std::unique_ptr<VlmRunner> create(const SmolVlmModel& model, const VlmRunnerOptions& options);
  // Encodes `image` for sequence `index`; the <image> tokens of the next prompt prefilled in that
  // sequence take its features in order. mn::Error when the frames do not fit max_image_tokens
  // or their size is not the model's.
  virtual void set_image(int64_t index, const SmolVlmImage& image) = 0;
  virtual const std::string& device_name() const = 0;
  virtual const LmRunner::BuildTimes& build_times() const = 0;
  virtual MemorySummary memory() const = 0;
  // With time_steps or profile: the GPU time of the last step of "vision", "prefill" or
  // "decode".
  virtual double step_gpu_ms(std::string_view program) const = 0;
  // With LmRunnerOptions::profile, the kernels of the last step of `program` and their GPU
  // times.
  virtual std::vector<KernelTime> profile(std::string_view program) const = 0;
  // The logits [batch, vocab] of the last step of "prefill" or "decode" at each sequence's
  // sampled position (read from the device on demand).
  virtual Array logits(std::string_view program) const = 0;
};

}  // namespace mn
