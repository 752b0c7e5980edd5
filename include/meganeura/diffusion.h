#pragma once
// Diffusion models: the U-Net of diffusers' UNet2DModel (the down/mid/up blocks of DDPM and of
// Stable Diffusion's image U-Net, without text conditioning) in diffusers' layout so that weights
// load by name, DDPM's noise-prediction training loss, and the DDPM and DDIM samplers run on the
// GPU one denoising step per submission.
//
// Parameter names are the state_dict keys of diffusers.UNet2DModel: conv_in, time_embedding.
// linear_{1,2}, down_blocks.N.{resnets.M.{norm1, conv1, time_emb_proj, norm2, conv2,
// conv_shortcut}, attentions.M.{group_norm, to_q, to_k, to_v, to_out.0}, downsamplers.0.conv},
// mid_block.{resnets.{0,1}, attentions.0}, up_blocks.N.{resnets, attentions, upsamplers.0.conv},
// conv_norm_out, conv_out.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/graph.h>
#include <meganeura/nn.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

namespace mn::diffusion {

// diffusers.UNet2DModel's configuration (its defaults), with the positional time embedding, conv
// down- and upsampling, SiLU, no dropout and no class conditioning.
struct UNet2DConfig {
  int64_t in_channels = 3, out_channels = 3;
  std::vector<int64_t> block_out_channels{224, 448, 672, 896};
  // "DownBlock2D" or "AttnDownBlock2D"; "UpBlock2D" or "AttnUpBlock2D" (one per channel count).
  std::vector<std::string> down_block_types{"DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D",
                                            "AttnDownBlock2D"};
  std::vector<std::string> up_block_types{"AttnUpBlock2D", "AttnUpBlock2D", "AttnUpBlock2D",
                                          "UpBlock2D"};
  int64_t layers_per_block = 2;
  int64_t attention_head_dim = 8;  // 0: one head as wide as the block (diffusers' None)
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;
  bool flip_sin_to_cos = true;  // the time embedding is [cos, sin] (else [sin, cos])
  double freq_shift = 0.0;
  bool add_attention = true;  // the mid block's attention
};

// A small U-Net for 28×28 (Fashion-MNIST) or 32×32 images of `channels` channels: 32, 64, 64
// channels at 28², 14², 7², attention at 14² and 7² and in the middle, two ResBlocks per level,
// GroupNorm of 8 groups, heads of 8.
UNet2DConfig unet_small_config(int64_t channels = 1);

class UNet2DModel : public nn::Module {
 public:
  // mn::Error naming the field for a configuration that does not fit together.
  explicit UNet2DModel(const UNet2DConfig& config);
  const UNet2DConfig& config() const { return config_; }

  // The predicted noise [B, out_channels, H, W] of `sample` [B, in_channels, H, W] at `timesteps`
  // [B] (float; diffusers' timestep values, 0 to the schedule's length). H and W must be
  // multiples of 2^(levels - 1). mn::ShapeError naming the input otherwise.
  Tensor forward(Tensor sample, Tensor timesteps);
  Tensor forward(Tensor x) override;  // an error: the U-Net takes a timestep too

  // The number of halvings from the input to the middle block.
  int64_t downsamples() const;

 private:
  Tensor time_embedding(Tensor timesteps);

  UNet2DConfig config_;
  std::shared_ptr<nn::Conv2d> conv_in_, conv_out_;
  std::shared_ptr<nn::Module> time_embedding_;
  std::shared_ptr<nn::ModuleList> down_blocks_, up_blocks_;
  std::shared_ptr<nn::Module> mid_block_;
  std::shared_ptr<nn::GroupNorm> conv_norm_out_;
};

// The forward process: betas and their cumulative products ᾱ_t = Π(1 - β_s), s ≤ t.
struct NoiseSchedule {
  std::vector<double> betas, alphas_cumprod;
  int64_t steps() const { return static_cast<int64_t>(betas.size()); }

  // diffusers' "linear" (DDPM: 1e-4 to 0.02) and "scaled_linear" (Stable Diffusion: the square
  // of a line between √0.00085 and √0.012) schedules. mn::Error for steps < 2 or betas outside
  // (0, 1).
  static NoiseSchedule linear(int64_t steps = 1000, double beta_start = 1e-4,
                              double beta_end = 0.02);
  static NoiseSchedule scaled_linear(int64_t steps = 1000, double beta_start = 0.00085,
                                     double beta_end = 0.012);
};

// DDPM's noise-prediction loss: x_t = √ᾱ_t·x0 + √(1 - ᾱ_t)·noise, mean((unet(x_t, t) - noise)²).
// x0 and noise [B, C, H, W] (images scaled to [-1, 1]); timesteps i32 [B] in [0, steps) pick
// ᾱ_t from the schedule on the GPU.
Tensor ddpm_loss(UNet2DModel& unet, const NoiseSchedule& schedule, Tensor x0, Tensor noise,
                 Tensor timesteps);

enum class SamplerKind { ddpm, ddim };

struct SamplerOptions {
  SamplerKind kind = SamplerKind::ddim;
  int64_t steps = 50;      // inference steps, at diffusers' "leading" spacing
  double eta = 0.0;        // DDIM's noise (0: deterministic; 1: DDPM's variance)
  bool clip_sample = true;  // the predicted x0 clamped to [-1, 1], as both schedulers default
};

// One denoising step: x_prev = c0·x̂0 + c1·x + c2·ε + σ·z with ε = unet(x, t) and
// x̂0 = clip((x - √(1 - ᾱ_t)·ε) / √ᾱ_t). Both samplers are this formula with other coefficients.
struct SamplerStep {
  int64_t timestep = 0;
  double sqrt_one_minus_alpha = 0, inv_sqrt_alpha = 0;  // of ᾱ_t, for x̂0
  double c0 = 0, c1 = 0, c2 = 0, sigma = 0;
};

// The steps of diffusers' DDPMScheduler (variance "fixed_small") or DDIMScheduler
// (set_alpha_to_one) after set_timesteps(options.steps). mn::Error for steps outside
// [1, schedule.steps()] or a negative eta.
std::vector<SamplerStep> sampler_steps(const NoiseSchedule& schedule, const SamplerOptions& options);

// Adds to `g` one denoising step of a batch of `shape` [B, C, H, W]: the state "sample" (x, set
// to the initial noise before the first step), the inputs "timestep" (f32 []),
// "step_coefficients" ([6]: √(1 - ᾱ_t), 1/√ᾱ_t, c0, c1, c2, σ) and "step_noise" (z, shaped as
// the sample); the step assigns x_prev to "sample".
void add_sampling_step(Graph& g, UNet2DModel& unet, const Shape& shape, bool clip_sample = true);

// Runs `steps` in `program` of `session` (a graph of add_sampling_step, the U-Net's weights set)
// from `initial` noise, one submission per step; step_noise(i) gives step i's z when its σ is not
// zero. Returns the final sample.
Array run_sampler(Session& session, const std::string& program,
                  const std::vector<SamplerStep>& steps, const Array& initial,
                  const std::function<Array(size_t)>& step_noise);

// Training a U-Net to predict noise (DDPM) on a data set of images, then sampling from it.
struct DdpmTrainOptions {
  UNet2DConfig unet = unet_small_config();
  NoiseSchedule schedule = NoiseSchedule::linear();
  Optimizer optimizer = Optimizer::adam({.lr = 1e-3});  // with its learning rate and schedule
  int64_t batch = 64;   // the last short batch of each epoch is dropped
  int64_t epochs = 1;
  uint64_t seed = 0;    // initialization, data order, noise and timesteps
  SessionOptions session;
  int64_t samples = 16;  // images sampled at the end (0: none)
  SamplerOptions sampler;
  struct Progress {
    int64_t epoch = 0, epochs = 0, step = 0, steps_per_epoch = 0;
    double loss = 0;  // the mean loss of the epoch's steps so far
    double seconds = 0, samples_per_second = 0;
  };
  std::function<void(const Progress&)> on_progress;  // after every step
};

struct DdpmTrainResult {
  double final_loss = 0;  // the mean loss of the last epoch
  int64_t steps = 0;
  double seconds = 0, samples_per_second = 0;
  double sampling_seconds = 0;
  std::string device;
  Array samples;  // [samples, C, H, W], clipped to [-1, 1]
  // The trained U-Net and the session holding its weights (programs "train" and "sample"), for
  // nn::state_dict / save_state_dict.
  std::shared_ptr<UNet2DModel> unet;
  std::shared_ptr<Session> session;
};

// `images` [N, C, H, W] with pixels in [0, 1] (load_fashion_mnist's nchw layout) are scaled to
// [-1, 1]. Each step draws fresh noise and timesteps on the host from the seed. mn::Error naming
// the option for a bad value, an image shape the U-Net cannot take, or fewer images than a batch.
DdpmTrainResult train_ddpm(const Dataset& images, const DdpmTrainOptions& options);

}  // namespace mn::diffusion
