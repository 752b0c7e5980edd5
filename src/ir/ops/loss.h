#pragma once
// Attributes of the loss family (src/ir/ops/loss.cpp), read by the reference, the optimizer and
// the GPU code generator.
//
// Layout of the class-indexed losses (cross_entropy, nll_loss), as PyTorch: the scores have the
// class axis at 1 ([N, C, d1, ...]) or are a single sample [C]; index targets have the scores'
// shape without the class axis ([N, d1, ...] or []), probability targets the scores' shape.
//
// Every loss has an internal backward op (<loss>_backward) computing the exact gradient of one
// operand in a single pass (for cross_entropy: softmax − target, scaled), so that the reference
// evaluates it in double from the attributes (no constants rounded to f32) and the GPU backend
// lowers it to one kernel.
#include <array>
#include <cstdint>
#include <ostream>
#include <tuple>

#include <meganeura/graph.h>

namespace mn {

const char* reduction_name(Reduction r);
// Attribute printing finds this by argument-dependent lookup: "reduction=mean", not a number.
inline void print_value(std::ostream& os, Reduction r) { os << reduction_name(r); }

// mse_loss, l1_loss, binary_cross_entropy, binary_cross_entropy_with_logits.
struct LossAttrs {
  Reduction reduction = Reduction::mean;
  bool operator==(const LossAttrs&) const = default;
  auto fields() const { return std::tie(reduction); }
  static constexpr std::array<const char*, 1> names{"reduction"};
};

// smooth_l1_loss: 0.5 d²/beta where |d| < beta, else |d| - 0.5 beta; beta = 0 is l1_loss.
struct SmoothL1Attrs {
  Reduction reduction = Reduction::mean;
  double beta = 1.0;
  bool operator==(const SmoothL1Attrs&) const = default;
  auto fields() const { return std::tie(reduction, beta); }
  static constexpr std::array<const char*, 2> names{"reduction", "beta"};
};

// nll_loss. Elements whose target is ignore_index contribute 0 and are not counted by the mean;
// when every element is ignored the mean is 0/0 = NaN (as PyTorch) and the gradient is 0.
struct NllLossAttrs {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  bool operator==(const NllLossAttrs&) const = default;
  auto fields() const { return std::tie(reduction, ignore_index); }
  static constexpr std::array<const char*, 2> names{"reduction", "ignore_index"};
};

// cross_entropy. The target kind follows its dtype (i32: class indices, float: probabilities).
// With label smoothing e the target becomes (1 - e) * target + e / C; ignore_index applies to
// index targets only, with nll_loss's mean and NaN rules. Probability targets are not required to
// sum to 1 (the gradient is softmax * sum(target) - target).
struct CrossEntropyAttrs {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  bool operator==(const CrossEntropyAttrs&) const = default;
  auto fields() const { return std::tie(reduction, ignore_index, label_smoothing); }
  static constexpr std::array<const char*, 3> names{"reduction", "ignore_index", "label_smoothing"};
};

// <loss>_backward(x, y, cotangent) for the two-operand losses: the gradient of operand `wrt`
// (0 or 1), shaped like that operand. cross_entropy_backward with wrt = 1 needs a probability
// target.
template <class Forward>
struct LossBackwardAttrs {
  Forward forward;
  int64_t wrt = 0;
  bool operator==(const LossBackwardAttrs&) const = default;
  auto fields() const { return std::tie(forward, wrt); }
  static constexpr std::array<const char*, 2> names{"forward", "wrt"};
};

// nll_loss_backward(target, cotangent): the gradient of the log-probabilities, whose values it
// does not need, so only their class count is kept (the shape follows from the target's).
struct NllLossBackwardAttrs {
  NllLossAttrs forward;
  int64_t classes = 1;
  bool operator==(const NllLossBackwardAttrs&) const = default;
  auto fields() const { return std::tie(forward, classes); }
  static constexpr std::array<const char*, 2> names{"forward", "classes"};
};

}  // namespace mn
