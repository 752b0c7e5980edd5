// LayerNorm and RMSNorm over the trailing normalized_shape axes; GroupNorm over channel groups.
#include <algorithm>
#include <cmath>
#include <limits>

#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

namespace {

void check_normalized_shape(const Module& m, const Shape& shape, double eps) {
  if (shape.empty()) throw Error(m.where() + ": normalized_shape is empty");
  for (int64_t d : shape) {
    if (d < 1)
      throw Error(m.where() + ": normalized_shape " + shape_str(shape) + " has a size < 1");
  }
  if (!(eps > 0) || !std::isfinite(eps)) {
    throw Error(m.where() + ": eps is " + std::to_string(eps) + ", expected a positive number");
  }
}

void require_trailing(const Module& m, const Tensor& x, const Shape& shape) {
  require_input(m, x);
  require_float(m, x);
  const auto n = static_cast<int>(shape.size());
  if (x.rank() < n || !std::equal(shape.begin(), shape.end(), x.shape().end() - n)) {
    throw ShapeError(m.where() + ": expected an input ending in " + shape_str(shape) + ", got " +
                     x.type().str());
  }
}

}  // namespace

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias)
    : Module("LayerNorm"),
      normalized_shape(std::move(normalized_shape)),
      eps(eps),
      affine(elementwise_affine),
      has_bias(elementwise_affine && bias) {
  check_normalized_shape(*this, this->normalized_shape, eps);
  if (affine) register_parameter("weight", this->normalized_shape, Init::ones());
  if (has_bias) register_parameter("bias", this->normalized_shape, Init::zeros());
}

Tensor LayerNorm::forward(Tensor x) {
  require_trailing(*this, x, normalized_shape);
  Graph& g = x.graph();
  return layer_norm(x, affine ? tensor(g, "weight") : Tensor{},
                    has_bias ? tensor(g, "bias") : Tensor{},
                    static_cast<int64_t>(normalized_shape.size()), eps);
}

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : Module("RMSNorm"),
      normalized_shape(std::move(normalized_shape)),
      eps(eps.value_or(std::numeric_limits<float>::epsilon())),
      affine(elementwise_affine) {
  check_normalized_shape(*this, this->normalized_shape, this->eps);
  if (affine) register_parameter("weight", this->normalized_shape, Init::ones());
}

Tensor RMSNorm::forward(Tensor x) {
  require_trailing(*this, x, normalized_shape);
  return rms_norm(x, affine ? tensor(x.graph(), "weight") : Tensor{}, eps,
                  static_cast<int64_t>(normalized_shape.size()));
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : Module("GroupNorm"),
      num_groups(num_groups),
      num_channels(num_channels),
      eps(eps),
      affine(affine) {
  require_positive(*this, num_groups, "num_groups");
  require_positive(*this, num_channels, "num_channels");
  if (num_channels % num_groups != 0) {
    throw Error(where() + ": num_channels " + std::to_string(num_channels) +
                " is not a multiple of num_groups " + std::to_string(num_groups));
  }
  check_normalized_shape(*this, {num_channels}, eps);
  if (affine) {
    register_parameter("weight", {num_channels}, Init::ones());
    register_parameter("bias", {num_channels}, Init::zeros());
  }
}

Tensor GroupNorm::forward(Tensor x) {
  require_input(*this, x);
  require_float(*this, x);
  if (x.rank() < 2 || x.shape()[1] != num_channels) {
    throw ShapeError(where() + ": expected an input [N, " + std::to_string(num_channels) +
                     ", *], got " + x.type().str());
  }
  Graph& g = x.graph();
  return group_norm(x, num_groups, affine ? tensor(g, "weight") : Tensor{},
                    affine ? tensor(g, "bias") : Tensor{}, eps);
}

}  // namespace mn::nn
