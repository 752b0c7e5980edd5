// BatchNorm2d: the module owns its running statistics. In training the graph normalizes with
// the batch's statistics and assigns the updated running ones (and num_batches_tracked + 1)
// after the step, so no caller writes state by hand; in evaluation it reads them.
#include <cmath>

#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, bool affine)
    : Module("BatchNorm2d"),
      num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine) {
  require_positive(*this, num_features, "num_features");
  if (!(eps > 0) || !std::isfinite(eps))
    throw Error(where() + ": eps is " + std::to_string(eps) + ", expected a positive number");
  if (!(momentum >= 0 && momentum <= 1))
    throw Error(where() + ": momentum is " + std::to_string(momentum) + ", expected [0, 1]");
  if (affine) {
    register_parameter("weight", {num_features}, Init::ones());
    register_parameter("bias", {num_features}, Init::zeros());
  }
  register_buffer("running_mean", {num_features}, Init::zeros());
  register_buffer("running_var", {num_features}, Init::ones());
  // PyTorch keeps an int64 count; the graph counts in i32 (2^31 steps) and files hold I64.
  register_buffer("num_batches_tracked", {}, Init::zeros(), DType::i32, ElemType::i64);
}

Tensor BatchNorm2d::forward(Tensor x) {
  require_rank(*this, x, 4, "[N, C, H, W]");
  require_float(*this, x);
  if (x.dim(1) != num_features) {
    throw ShapeError(where() + ": expected " + std::to_string(num_features) +
                     " channels (axis 1), got " + x.type().str());
  }
  Graph& g = x.graph();
  Tensor mean = tensor(g, "running_mean"), var = tensor(g, "running_var");
  Tensor count = tensor(g, "num_batches_tracked");
  BatchNormResult r =
      batch_norm(x, affine ? tensor(g, "weight") : Tensor{}, affine ? tensor(g, "bias") : Tensor{},
                 mean, var, training(), momentum, eps);
  if (training()) {
    g.assign(mean, r.running_mean);
    g.assign(var, r.running_var);
    g.assign(count, count + 1.0);
  }
  return r.y;
}

}  // namespace mn::nn
