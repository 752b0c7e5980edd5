// Conv1d and Conv2d: weights [out, in/groups, k...] as PyTorch stores them, zero padding.
#include <cmath>

#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dConfig config)
    : Module("Conv1d"),
      in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      config(config) {
  require_positive(*this, in_channels, "in_channels");
  require_positive(*this, out_channels, "out_channels");
  require_positive(*this, config.groups, "groups");
  require_positive(*this, kernel_size, "kernel_size");
  require_positive(*this, config.stride, "stride");
  require_positive(*this, config.dilation, "dilation");
  if (config.padding < 0) throw Error(where() + ": padding is negative");
  if (in_channels % config.groups || out_channels % config.groups) {
    throw Error(where() + ": in_channels " + std::to_string(in_channels) + " and out_channels " +
                std::to_string(out_channels) + " must be multiples of groups " +
                std::to_string(config.groups));
  }
  // PyTorch's default initialisation: uniform in ±1/sqrt(fan_in).
  const int64_t fan_in = in_channels / config.groups * kernel_size;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  register_parameter("weight", {out_channels, in_channels / config.groups, kernel_size},
                     Init::uniform(-bound, bound, 0));
  if (config.bias) register_parameter("bias", {out_channels}, Init::uniform(-bound, bound, 1));
}

Tensor Conv1d::forward(Tensor x) {
  if (x.rank() != 2 && x.rank() != 3) {
    throw ShapeError(where() + ": expected x of shape [N, C, L] or [C, L], got " + x.type().str());
  }
  require_float(*this, x);
  if (x.dim(-2) != in_channels) {
    throw ShapeError(where() + ": expected " + std::to_string(in_channels) +
                     " channels (axis -2), got " + x.type().str());
  }
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
  require_positive(*this, in_channels, "in_channels");
  require_positive(*this, out_channels, "out_channels");
  require_positive(*this, config.groups, "groups");
  for (int i = 0; i < 2; ++i) {
    require_positive(*this, kernel_size[i], "kernel_size");
    require_positive(*this, config.stride[i], "stride");
    require_positive(*this, config.dilation[i], "dilation");
    if (config.padding[i] < 0) throw Error(where() + ": padding is negative");
  }
  if (in_channels % config.groups || out_channels % config.groups) {
    throw Error(where() + ": in_channels " + std::to_string(in_channels) + " and out_channels " +
                std::to_string(out_channels) + " must be multiples of groups " +
                std::to_string(config.groups));
  }
  const int64_t fan_in = in_channels / config.groups * kernel_size[0] * kernel_size[1];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  register_parameter("weight",
                     {out_channels, in_channels / config.groups, kernel_size[0], kernel_size[1]},
                     Init::uniform(-bound, bound, 0));
  if (config.bias) register_parameter("bias", {out_channels}, Init::uniform(-bound, bound, 1));
}

Tensor Conv2d::forward(Tensor x) {
  require_rank(*this, x, 4, "[N, C, H, W]");
  require_float(*this, x);
  if (x.dim(1) != in_channels) {
    throw ShapeError(where() + ": expected " + std::to_string(in_channels) +
                     " channels (axis 1), got " + x.type().str());
  }
  Graph& g = x.graph();
  Conv2dOptions opt;
  opt.stride = config.stride;
  opt.padding = config.padding;
  opt.dilation = config.dilation;
  opt.groups = config.groups;
  return conv2d(x, tensor(g, "weight"), config.bias ? tensor(g, "bias") : Tensor{}, opt);
}

}  // namespace mn::nn
