// diffusers' UNet2DModel (unets/unet_2d.py) with its blocks (unet_2d_blocks.py: DownBlock2D,
// AttnDownBlock2D, UNetMidBlock2D, UpBlock2D, AttnUpBlock2D; resnet.py: ResnetBlock2D,
// Downsample2D, Upsample2D; attention_processor.py: Attention as the blocks configure it;
// embeddings.py: Timesteps, TimestepEmbedding), registered under diffusers' names.
#include <cmath>
#include <string>
#include <vector>

#include <meganeura/diffusion.h>
#include <meganeura/error.h>
#include <meganeura/ops.h>

namespace mn::diffusion {

namespace {

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  nn::Conv2dConfig c;
  c.stride = {stride, stride};
  c.padding = {1, 1};
  return std::make_shared<nn::Conv2d>(in, out, std::array<int64_t, 2>{3, 3}, c);
}

// GroupNorm → SiLU → Conv3×3, plus the time embedding projected to the channels, twice; a 1×1
// convolution carries the input across when the channel count changes.
class ResnetBlock2D : public nn::Module {
 public:
  ResnetBlock2D(const UNet2DConfig& c, int64_t in, int64_t out, int64_t temb)
      : Module("ResnetBlock2D") {
    norm1_ = register_module("norm1", std::make_shared<nn::GroupNorm>(c.norm_num_groups, in,
                                                                       c.norm_eps));
    conv1_ = register_module("conv1", conv3x3(in, out));
    time_emb_proj_ = register_module("time_emb_proj", std::make_shared<nn::Linear>(temb, out));
    norm2_ = register_module("norm2", std::make_shared<nn::GroupNorm>(c.norm_num_groups, out,
                                                                       c.norm_eps));
    conv2_ = register_module("conv2", conv3x3(out, out));
    if (in != out) {
      conv_shortcut_ = register_module(
          "conv_shortcut", std::make_shared<nn::Conv2d>(in, out, std::array<int64_t, 2>{1, 1}));
    }
  }

  Tensor forward(Tensor x, Tensor temb) {
    Tensor h = conv1_->forward(silu(norm1_->forward(x)));
    Tensor t = time_emb_proj_->forward(silu(temb));
    h = h + reshape(t, {t.shape()[0], t.shape()[1], 1, 1});
    h = conv2_->forward(silu(norm2_->forward(h)));
    return (conv_shortcut_ ? conv_shortcut_->forward(x) : x) + h;
  }

 private:
  std::shared_ptr<nn::GroupNorm> norm1_, norm2_;
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv_shortcut_;
  std::shared_ptr<nn::Linear> time_emb_proj_;
};

// Self-attention over the H·W positions of a feature map, GroupNorm first, residual added.
class SpatialAttention : public nn::Module {
 public:
  SpatialAttention(const UNet2DConfig& c, int64_t channels) : Module("Attention") {
    head_dim_ = c.attention_head_dim > 0 ? c.attention_head_dim : channels;
    if (channels % head_dim_ != 0) {
      throw Error("UNet2DModel: a block of " + std::to_string(channels) +
                  " channels is not a multiple of attention_head_dim " +
                  std::to_string(c.attention_head_dim));
    }
    heads_ = channels / head_dim_;
    group_norm_ = register_module(
        "group_norm", std::make_shared<nn::GroupNorm>(c.norm_num_groups, channels, c.norm_eps));
    to_q_ = register_module("to_q", std::make_shared<nn::Linear>(channels, channels));
    to_k_ = register_module("to_k", std::make_shared<nn::Linear>(channels, channels));
    to_v_ = register_module("to_v", std::make_shared<nn::Linear>(channels, channels));
    auto to_out = register_module("to_out", std::make_shared<nn::ModuleList>());
    to_out_ = std::make_shared<nn::Linear>(channels, channels);
    to_out->push_back(to_out_);  // to_out.1 is diffusers' dropout: no parameters
  }

  Tensor forward(Tensor x) override {
    const Shape& s = x.shape();
    const int64_t b = s[0], ch = s[1], n = s[2] * s[3];
    // [B, C, H, W] → [B, HW, C], the tokens the projections read.
    Tensor tokens = transpose(reshape(group_norm_->forward(x), {b, ch, n}), 1, 2);
    auto heads = [&](Tensor t) {
      return permute(reshape(t, {b, n, heads_, head_dim_}), {0, 2, 1, 3});
    };
    Tensor a = scaled_dot_product_attention(heads(to_q_->forward(tokens)),
                                            heads(to_k_->forward(tokens)),
                                            heads(to_v_->forward(tokens)));
    Tensor out = to_out_->forward(reshape(permute(a, {0, 2, 1, 3}), {b, n, ch}));
    return reshape(transpose(out, 1, 2), s) + x;
  }

 private:
  int64_t heads_ = 1, head_dim_ = 1;
  std::shared_ptr<nn::GroupNorm> group_norm_;
  std::shared_ptr<nn::Linear> to_q_, to_k_, to_v_, to_out_;
};

// Downsample2D and Upsample2D: their convolution is their child "conv" (the resampling itself
// is the block's forward).
class Resampler : public nn::Module {
 public:
  Resampler(const char* kind, std::shared_ptr<nn::Conv2d> conv) : Module(kind) {
    register_module("conv", std::move(conv));
  }
};

// ResBlocks (each followed by attention in the Attn blocks) and the stride-2 convolution that
// halves the map (all but the last block). Every ResBlock's output and the halved map are kept
// for the up path's skip connections.
class DownBlock : public nn::Module {
 public:
  DownBlock(const UNet2DConfig& c, const std::string& type, int64_t in, int64_t out, int64_t temb,
            bool downsample)
      : Module(type) {
    const bool attention = type == "AttnDownBlock2D";
    if (attention) attentions_ = register_module("attentions", std::make_shared<nn::ModuleList>());
    resnets_ = register_module("resnets", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.layers_per_block; ++i) {
      resnets_->push_back(std::make_shared<ResnetBlock2D>(c, i == 0 ? in : out, out, temb));
      if (attention) attentions_->push_back(std::make_shared<SpatialAttention>(c, out));
    }
    if (downsample) {
      auto list = register_module("downsamplers", std::make_shared<nn::ModuleList>());
      downsample_ = conv3x3(out, out, 2);
      list->push_back(std::make_shared<Resampler>("Downsample2D", downsample_));
    }
  }

  Tensor forward(Tensor x, Tensor temb, std::vector<Tensor>& skips) {
    for (size_t i = 0; i < resnets_->size(); ++i) {
      x = resnets_->at<ResnetBlock2D>(i)->forward(x, temb);
      if (attentions_) x = attentions_->at<SpatialAttention>(i)->forward(x);
      skips.push_back(x);
    }
    if (downsample_) {
      x = downsample_->forward(x);
      skips.push_back(x);
    }
    return x;
  }

 private:
  std::shared_ptr<nn::ModuleList> resnets_, attentions_;
  std::shared_ptr<nn::Conv2d> downsample_;
};

// ResBlock, attention, ResBlock at the lowest resolution.
class MidBlock : public nn::Module {
 public:
  MidBlock(const UNet2DConfig& c, int64_t channels, int64_t temb) : Module("UNetMidBlock2D") {
    if (c.add_attention) {
      attentions_ = register_module("attentions", std::make_shared<nn::ModuleList>());
      attentions_->push_back(std::make_shared<SpatialAttention>(c, channels));
    }
    resnets_ = register_module("resnets", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 2; ++i) {
      resnets_->push_back(std::make_shared<ResnetBlock2D>(c, channels, channels, temb));
    }
  }

  Tensor forward(Tensor x, Tensor temb) {
    x = resnets_->at<ResnetBlock2D>(0)->forward(x, temb);
    if (attentions_) x = attentions_->at<SpatialAttention>(0)->forward(x);
    return resnets_->at<ResnetBlock2D>(1)->forward(x, temb);
  }

 private:
  std::shared_ptr<nn::ModuleList> resnets_, attentions_;
};

// layers_per_block + 1 ResBlocks, each reading the map concatenated with the latest skip (the
// down path's outputs in reverse), then nearest ×2 upsampling and a convolution (all but the
// last block).
class UpBlock : public nn::Module {
 public:
  UpBlock(const UNet2DConfig& c, const std::string& type, int64_t in, int64_t prev_out,
          int64_t out, int64_t temb, bool upsample)
      : Module(type) {
    const bool attention = type == "AttnUpBlock2D";
    if (attention) attentions_ = register_module("attentions", std::make_shared<nn::ModuleList>());
    resnets_ = register_module("resnets", std::make_shared<nn::ModuleList>());
    const int64_t layers = c.layers_per_block + 1;
    for (int64_t i = 0; i < layers; ++i) {
      const int64_t skip = i == layers - 1 ? in : out;
      const int64_t from = i == 0 ? prev_out : out;
      resnets_->push_back(std::make_shared<ResnetBlock2D>(c, from + skip, out, temb));
      if (attention) attentions_->push_back(std::make_shared<SpatialAttention>(c, out));
    }
    if (upsample) {
      auto list = register_module("upsamplers", std::make_shared<nn::ModuleList>());
      upsample_ = conv3x3(out, out);
      list->push_back(std::make_shared<Resampler>("Upsample2D", upsample_));
    }
  }

  size_t skips_used() const { return resnets_->size(); }

  Tensor forward(Tensor x, Tensor temb, std::vector<Tensor>& skips) {
    for (size_t i = 0; i < resnets_->size(); ++i) {
      x = concat({x, skips.back()}, 1);
      skips.pop_back();
      x = resnets_->at<ResnetBlock2D>(i)->forward(x, temb);
      if (attentions_) x = attentions_->at<SpatialAttention>(i)->forward(x);
    }
    if (upsample_) {
      x = upsample_->forward(upsample_nearest2d(x, 2 * x.shape()[2], 2 * x.shape()[3]));
    }
    return x;
  }

 private:
  std::shared_ptr<nn::ModuleList> resnets_, attentions_;
  std::shared_ptr<nn::Conv2d> upsample_;
};

// TimestepEmbedding: Linear → SiLU → Linear.
class TimestepEmbedding : public nn::Module {
 public:
  TimestepEmbedding(int64_t in, int64_t out) : Module("TimestepEmbedding") {
    linear_1_ = register_module("linear_1", std::make_shared<nn::Linear>(in, out));
    linear_2_ = register_module("linear_2", std::make_shared<nn::Linear>(out, out));
  }
  Tensor forward(Tensor x) override { return linear_2_->forward(silu(linear_1_->forward(x))); }

 private:
  std::shared_ptr<nn::Linear> linear_1_, linear_2_;
};

void check_config(const UNet2DConfig& c) {
  auto fail = [](const std::string& what) { throw Error("UNet2DModel: " + what); };
  auto positive = [&](int64_t v, const char* field) {
    if (v < 1) fail(std::string(field) + " is " + std::to_string(v) + ", expected >= 1");
  };
  positive(c.in_channels, "in_channels");
  positive(c.out_channels, "out_channels");
  positive(c.layers_per_block, "layers_per_block");
  positive(c.norm_num_groups, "norm_num_groups");
  if (c.attention_head_dim < 0) fail("attention_head_dim is negative");
  const size_t levels = c.block_out_channels.size();
  if (levels == 0) fail("block_out_channels is empty");
  if (c.down_block_types.size() != levels || c.up_block_types.size() != levels) {
    fail("block_out_channels has " + std::to_string(levels) + " entries but down_block_types " +
         std::to_string(c.down_block_types.size()) + " and up_block_types " +
         std::to_string(c.up_block_types.size()));
  }
  for (size_t i = 0; i < levels; ++i) {
    const int64_t ch = c.block_out_channels[i];
    positive(ch, "a block_out_channels entry");
    if (ch % c.norm_num_groups != 0) {
      fail("block_out_channels[" + std::to_string(i) + "] = " + std::to_string(ch) +
           " is not a multiple of norm_num_groups " + std::to_string(c.norm_num_groups));
    }
    const std::string& d = c.down_block_types[i];
    const std::string& u = c.up_block_types[i];
    if (d != "DownBlock2D" && d != "AttnDownBlock2D") {
      fail("down_block_types[" + std::to_string(i) + "] is '" + d +
           "', expected DownBlock2D or AttnDownBlock2D");
    }
    if (u != "UpBlock2D" && u != "AttnUpBlock2D") {
      fail("up_block_types[" + std::to_string(i) + "] is '" + u +
           "', expected UpBlock2D or AttnUpBlock2D");
    }
  }
  if (c.block_out_channels[0] % 2 != 0) {
    fail("block_out_channels[0] = " + std::to_string(c.block_out_channels[0]) +
         " must be even (the sinusoidal time embedding's width)");
  }
  if (!(c.norm_eps > 0)) fail("norm_eps must be positive");
}

}  // namespace

UNet2DConfig unet_small_config(int64_t channels) {
  UNet2DConfig c;
  c.in_channels = c.out_channels = channels;
  c.block_out_channels = {32, 64, 64};
  c.down_block_types = {"DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"};
  c.up_block_types = {"AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"};
  c.norm_num_groups = 8;
  c.attention_head_dim = 8;
  return c;
}

UNet2DModel::UNet2DModel(const UNet2DConfig& config) : Module("UNet2DModel"), config_(config) {
  check_config(config_);
  const std::vector<int64_t>& ch = config_.block_out_channels;
  const size_t levels = ch.size();
  const int64_t temb = ch[0] * 4;
  conv_in_ = register_module("conv_in", conv3x3(config_.in_channels, ch[0]));
  time_embedding_ =
      register_module("time_embedding", std::make_shared<TimestepEmbedding>(ch[0], temb));
  down_blocks_ = register_module("down_blocks", std::make_shared<nn::ModuleList>());
  for (size_t i = 0; i < levels; ++i) {
    down_blocks_->push_back(std::make_shared<DownBlock>(config_, config_.down_block_types[i],
                                                        i == 0 ? ch[0] : ch[i - 1], ch[i], temb,
                                                        i + 1 < levels));
  }
  mid_block_ = register_module("mid_block", std::make_shared<MidBlock>(config_, ch.back(), temb));
  up_blocks_ = register_module("up_blocks", std::make_shared<nn::ModuleList>());
  for (size_t i = 0; i < levels; ++i) {
    const size_t r = levels - 1 - i;  // the level this block rebuilds
    const int64_t prev_out = ch[std::min(levels - 1, r + 1)];
    const int64_t in = ch[r == 0 ? 0 : r - 1];
    up_blocks_->push_back(std::make_shared<UpBlock>(config_, config_.up_block_types[i], in,
                                                    prev_out, ch[r], temb, i + 1 < levels));
  }
  conv_norm_out_ = register_module(
      "conv_norm_out",
      std::make_shared<nn::GroupNorm>(config_.norm_num_groups, ch[0], config_.norm_eps));
  conv_out_ = register_module("conv_out", conv3x3(ch[0], config_.out_channels));
}

int64_t UNet2DModel::downsamples() const {
  return static_cast<int64_t>(config_.block_out_channels.size()) - 1;
}

// diffusers' get_timestep_embedding: t·exp(-ln(10⁴)·i / (half - freq_shift)), as sin and cos.
Tensor UNet2DModel::time_embedding(Tensor timesteps) {
  const int64_t half = config_.block_out_channels[0] / 2;
  std::vector<double> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    freqs[static_cast<size_t>(i)] = std::exp(-std::log(10000.0) * static_cast<double>(i) /
                                             (static_cast<double>(half) - config_.freq_shift));
  }
  Graph& g = timesteps.graph();
  Tensor angles = reshape(timesteps, {timesteps.shape()[0], 1}) *
                  g.constant(Array({1, half}, DType::f32, std::move(freqs)));
  Tensor s = sin(angles), c = cos(angles);
  return concat(config_.flip_sin_to_cos ? std::vector<Tensor>{c, s} : std::vector<Tensor>{s, c},
                1);
}

Tensor UNet2DModel::forward(Tensor sample, Tensor timesteps) {
  if (!sample.valid() || !timesteps.valid()) {
    throw Error("UNet2DModel: the sample or the timesteps is an invalid Tensor");
  }
  const int64_t multiple = int64_t{1} << downsamples();
  const Shape& s = sample.shape();
  if (sample.rank() != 4 || s[1] != config_.in_channels || s[2] % multiple != 0 ||
      s[3] % multiple != 0 || !is_float(sample.dtype())) {
    throw ShapeError("UNet2DModel: the sample must be float [B, " +
                     std::to_string(config_.in_channels) + ", H, W] with H and W multiples of " +
                     std::to_string(multiple) + ", got " + sample.type().str());
  }
  if (timesteps.shape() != Shape{s[0]} || timesteps.dtype() != sample.dtype()) {
    throw ShapeError("UNet2DModel: the timesteps must be " + std::string(dtype_name(sample.dtype())) + " [" +
                     std::to_string(s[0]) + "], got " + timesteps.type().str());
  }
  Tensor temb = time_embedding_->forward(time_embedding(timesteps));
  Tensor x = conv_in_->forward(sample);
  std::vector<Tensor> skips{x};
  for (size_t i = 0; i < down_blocks_->size(); ++i) {
    x = down_blocks_->at<DownBlock>(i)->forward(x, temb, skips);
  }
  x = std::static_pointer_cast<MidBlock>(mid_block_)->forward(x, temb);
  for (size_t i = 0; i < up_blocks_->size(); ++i) {
    x = up_blocks_->at<UpBlock>(i)->forward(x, temb, skips);
  }
  return conv_out_->forward(silu(conv_norm_out_->forward(x)));
}

Tensor UNet2DModel::forward(Tensor) {
  throw Error("UNet2DModel takes a sample and its timesteps: call forward(sample, timesteps)");
}

}  // namespace mn::diffusion
