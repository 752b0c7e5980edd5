#pragma once
// Attributes of the nn family (softmax, log_softmax, the normalizations, dropout), read by the
// reference, the optimizer and the GPU code generator.
//
// Optional operands (gamma, beta, running statistics) are not stored as placeholder tensors:
// the op's operand list holds only those present, in the order x, gamma, beta, mean, var, and
// the has_* flags say which are there. This keeps an absent gamma from costing a multiply and
// from appearing as a differentiable operand.
#include <array>
#include <cstdint>
#include <tuple>

#include <meganeura/graph.h>

namespace mn {

class OpRegistry;

// softmax and log_softmax. The public functions store a non-negative axis; a negative one is
// accepted too (counted from the end).
struct SoftmaxAttrs {
  int64_t axis = -1;
  bool operator==(const SoftmaxAttrs&) const = default;
  auto fields() const { return std::tie(axis); }
  static constexpr std::array<const char*, 1> names{"axis"};
};

// layer_norm: x, [gamma], [beta]; normalizes over the trailing `normalized_dims` axes.
struct LayerNormAttrs {
  int64_t normalized_dims = 1;
  double eps = 1e-5;
  bool has_gamma = false;
  bool has_beta = false;
  bool operator==(const LayerNormAttrs&) const = default;
  auto fields() const { return std::tie(normalized_dims, eps, has_gamma, has_beta); }
  static constexpr std::array<const char*, 4> names{"normalized_dims", "eps", "has_gamma",
                                                    "has_beta"};
};

// rms_norm: x, [gamma]; y = x * rsqrt(mean(x^2) + eps) * gamma over the trailing axes.
struct RmsNormAttrs {
  int64_t normalized_dims = 1;
  double eps = 1e-6;
  bool has_gamma = false;
  bool operator==(const RmsNormAttrs&) const = default;
  auto fields() const { return std::tie(normalized_dims, eps, has_gamma); }
  static constexpr std::array<const char*, 3> names{"normalized_dims", "eps", "has_gamma"};
};

// group_norm: x [N, C, ...], [gamma [C]], [beta [C]]; statistics per (sample, group of C/groups
// channels).
struct GroupNormAttrs {
  int64_t groups = 1;
  double eps = 1e-5;
  bool has_gamma = false;
  bool has_beta = false;
  bool operator==(const GroupNormAttrs&) const = default;
  auto fields() const { return std::tie(groups, eps, has_gamma, has_beta); }
  static constexpr std::array<const char*, 4> names{"groups", "eps", "has_gamma", "has_beta"};
};

// batch_norm: x [N, C, ...], [gamma [C]], [beta [C]], then in eval mode running_mean [C] and
// running_var [C]. Training normalizes with the batch statistics (biased variance) and takes no
// running statistics: their momentum update is built from mean/variance graph ops by the public
// function, so the op itself has a single output like every op.
struct BatchNormAttrs {
  bool training = true;
  double eps = 1e-5;
  bool has_gamma = false;
  bool has_beta = false;
  bool operator==(const BatchNormAttrs&) const = default;
  auto fields() const { return std::tie(training, eps, has_gamma, has_beta); }
  static constexpr std::array<const char*, 4> names{"training", "eps", "has_gamma", "has_beta"};
};

// dropout in training mode with p in [0, 1): element i (row-major index in the output) is kept
// when random_uniform(seed, step·numel + i) >= p (src/ir/random.h) and scaled by 1/(1-p), step
// being the op's optional second input (an i32/u32 scalar, 0 without it), so a recorded training
// step draws a new mask each time its step input or state changes. The vjp is the same
// op applied to the cotangent, which reproduces the mask exactly. random_uniform is a 24-bit
// integer u24 / 2^24, so the test equals u24 >= ceil(p * 2^24) in integers: a GPU kernel matches
// the reference bit for bit with that host-computed threshold, whatever its float precision.
struct DropoutAttrs {
  double p = 0.5;
  uint64_t seed = 0;
  bool operator==(const DropoutAttrs&) const = default;
  auto fields() const { return std::tie(p, seed); }
  static constexpr std::array<const char*, 2> names{"p", "seed"};
};

namespace ops {
// nn.cpp registers these from register_nn_ops; split by file to keep each under ~800 lines.
void register_softmax_ops(OpRegistry& r);     // nn.cpp
void register_norm_ops(OpRegistry& r);        // nn_norm.cpp
void register_batch_norm_ops(OpRegistry& r);  // nn_batch_norm.cpp
}  // namespace ops

}  // namespace mn
