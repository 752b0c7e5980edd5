// Dropout and Flatten: modules without parameters.
#include <cmath>

#include <meganeura/nn.h>

#include "nn/dropout_step.h"
#include "nn/input_checks.h"

namespace mn::nn {

Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  if (!(p >= 0 && p < 1)) {
    throw Error(where() + ": p is " + std::to_string(p) + ", expected a probability in [0, 1)");
  }
}

Tensor Dropout::forward(Tensor x) {
  require_input(*this, x);
  require_float(*this, x);
  return training() ? stepped_dropout(x, p, op_seed("mask")) : x;
}

Tensor Flatten::forward(Tensor x) {
  require_input(*this, x);
  const int start = normalize_axis(start_dim, x.rank(), where());
  Shape shape(x.shape().begin(), x.shape().begin() + start);
  int64_t rest = 1;
  for (int i = start; i < x.rank(); ++i) rest *= x.shape()[static_cast<size_t>(i)];
  shape.push_back(rest);
  return reshape(x, shape);
}

}  // namespace mn::nn
