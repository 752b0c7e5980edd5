// Linear: y = x·weightᵀ + bias, weight [out, in] as PyTorch stores it.
#include <cmath>

#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : Module("Linear"), in_features(in_features), out_features(out_features), has_bias(bias) {
  require_positive(*this, in_features, "in_features");
  require_positive(*this, out_features, "out_features");
  // PyTorch: kaiming_uniform(a=√5) for the weight and ±1/√fan_in for the bias, both ±1/√in.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  register_parameter("weight", {out_features, in_features}, Init::uniform(-bound, bound, 0));
  if (bias) register_parameter("bias", {out_features}, Init::uniform(-bound, bound, 1));
}

Tensor Linear::forward(Tensor x) {
  require_input(*this, x);
  require_float(*this, x);
  if (x.rank() < 1 || x.dim(-1) != in_features) {
    throw ShapeError(where() + ": expected an input [..., " + std::to_string(in_features) +
                     "], got " + x.type().str());
  }
  Graph& g = x.graph();
  Tensor y = matmul(x, tensor(g, "weight"), false, true);
  return has_bias ? y + tensor(g, "bias") : y;
}

}  // namespace mn::nn
