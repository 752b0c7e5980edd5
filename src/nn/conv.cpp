// Conv1d and Conv2d: weights [out, in/groups, k...] as PyTorch stores them, zero padding.
#include <cmath>

#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

namespace {

// Channel counts and groups of a convolution module: positive, the channels multiples of groups.
void check_channels(const Module& m, int64_t in, int64_t out, int64_t groups) {
  require_positive(m, in, "in_channels");
  require_positive(m, out, "out_channels");
  require_positive(m, groups, "groups");
  if (in % groups || out % groups) {
    throw Error(m.where() + ": in_channels " + std::to_string(in) + " and out_channels " +
                std::to_string(out) + " must be multiples of groups " + std::to_string(groups));
  }
}

// PyTorch's default initialisation of weight and bias: uniform in ±1/sqrt(fan_in).
double init_bound(int64_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); }

// x of a float dtype with `channels` on axis `axis`.
void require_channels(const Module& m, const Tensor& x, int axis, int64_t channels) {
  require_float(m, x);
  if (x.dim(axis) != channels) {
    throw ShapeError(m.where() + ": expected " + std::to_string(channels) + " channels (axis " +
                     std::to_string(axis) + "), got " + x.type().str());
  }
}

}  // namespace

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dConfig config)
    : Module("Conv1d"),
      in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      config(config) {
  check_channels(*this, in_channels, out_channels, config.groups);
  require_positive(*this, kernel_size, "kernel_size");
  require_positive(*this, config.stride, "stride");
  require_positive(*this, config.dilation, "dilation");
  if (config.padding < 0) throw Error(where() + ": padding is negative");
  const double bound = init_bound(in_channels / config.groups * kernel_size);
  register_parameter("weight", {out_channels, in_channels / config.groups, kernel_size},
                     Init::uniform(-bound, bound, 0));
  if (config.bias) register_parameter("bias", {out_channels}, Init::uniform(-bound, bound, 1));
}

Tensor Conv1d::forward(Tensor x) {
  if (x.rank() != 2 && x.rank() != 3) {
    throw ShapeError(where() + ": expected x of shape [N, C, L] or [C, L], got " + x.type().str());
  }
  require_channels(*this, x, -2, in_channels);
  Graph& g = x.graph();
  Conv1dOptions opt;
  opt.stride = config.stride;
  opt.padding = config.padding;
  opt.dilation = config.dilation;
  opt.groups = config.groups;
  return conv1d(x, tensor(g, "weight"), config.bias ? tensor(g, "bias") : Tensor{}, opt);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
               Conv2dConfig config)
    : Module("Conv2d"),
      in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      config(config) {
  check_channels(*this, in_channels, out_channels, config.groups);
  for (int i = 0; i < 2; ++i) {
    require_positive(*this, kernel_size[i], "kernel_size");
    require_positive(*this, config.stride[i], "stride");
    require_positive(*this, config.dilation[i], "dilation");
    if (config.padding[i] < 0) throw Error(where() + ": padding is negative");
  }
  const double bound = init_bound(in_channels / config.groups * kernel_size[0] * kernel_size[1]);
  register_parameter("weight",
                     {out_channels, in_channels / config.groups, kernel_size[0], kernel_size[1]},
                     Init::uniform(-bound, bound, 0));
  if (config.bias) register_parameter("bias", {out_channels}, Init::uniform(-bound, bound, 1));
}

Tensor Conv2d::forward(Tensor x) {
  require_rank(*this, x, 4, "[N, C, H, W]");
  require_channels(*this, x, 1, in_channels);
  Graph& g = x.graph();
  Conv2dOptions opt;
  opt.stride = config.stride;
  opt.padding = config.padding;
  opt.dilation = config.dilation;
  opt.groups = config.groups;
  return conv2d(x, tensor(g, "weight"), config.bias ? tensor(g, "bias") : Tensor{}, opt);
}

}  // namespace mn::nn
