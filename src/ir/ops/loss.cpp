// The loss family: the public loss functions, and the elementwise losses of two equal-shaped
// operands (mse, l1, smooth_l1, binary_cross_entropy[_with_logits]) with their backward ops.
// cross_entropy and nll_loss live in loss_class.cpp. Formulas follow PyTorch's CPU kernels
// (aten/src/ATen/native/Loss.cpp, BinaryOps) so that the reference matches them to rounding.
#include "ir/ops/loss.h"

#include <cmath>
#include <sstream>
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"
#include "ir/ops/loss_common.h"

namespace mn {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none:
      return "none";
    case Reduction::mean:
      return "mean";
    case Reduction::sum:
      return "sum";
  }
  return "?";
}

// ---- public functions ----

namespace {
// Checked here so that an empty first operand is reported with the loss's name.
Tensor apply_loss(const char* op, Attrs attrs, Tensor a, Tensor b) {
  if (!a.valid()) throw Error(std::string(op) + ": the first operand is an empty Tensor");
  return a.graph().apply(op, std::move(attrs), {a, b});
}
}  // namespace

Tensor cross_entropy(Tensor logits, Tensor target, CrossEntropyOptions opt) {
  return apply_loss("cross_entropy",
                    CrossEntropyAttrs{opt.reduction, opt.ignore_index, opt.label_smoothing}, logits,
                    target);
}
Tensor nll_loss(Tensor log_probs, Tensor target, Reduction reduction, int64_t ignore_index) {
  return apply_loss("nll_loss", NllLossAttrs{reduction, ignore_index}, log_probs, target);
}
Tensor mse_loss(Tensor x, Tensor y, Reduction reduction) {
  return apply_loss("mse_loss", LossAttrs{reduction}, x, y);
}
Tensor l1_loss(Tensor x, Tensor y, Reduction reduction) {
  return apply_loss("l1_loss", LossAttrs{reduction}, x, y);
}
Tensor smooth_l1_loss(Tensor x, Tensor y, Reduction reduction, double beta) {
  return apply_loss("smooth_l1_loss", SmoothL1Attrs{reduction, beta}, x, y);
}
Tensor binary_cross_entropy(Tensor p, Tensor y, Reduction reduction) {
  return apply_loss("binary_cross_entropy", LossAttrs{reduction}, p, y);
}
Tensor binary_cross_entropy_with_logits(Tensor x, Tensor y, Reduction reduction) {
  return apply_loss("binary_cross_entropy_with_logits", LossAttrs{reduction}, x, y);
}

// ---- helpers shared with loss_class.cpp ----

namespace ops {

TensorType loss_output_type(const Shape& per_element, DType dtype, Reduction r) {
  return r == Reduction::none ? TensorType{per_element, dtype} : TensorType{{}, dtype};
}

void check_reduction(std::string_view op, std::span<const TensorType> in, Reduction r) {
  if (r != Reduction::none && r != Reduction::mean && r != Reduction::sum) {
    shape_fail(op, in,
               "reduction must be none, mean or sum, got " + std::to_string(static_cast<int>(r)));
  }
}

Array reduce_losses(std::vector<double> per, const Shape& per_shape, DType dtype, Reduction r,
                    double count) {
  if (r == Reduction::none) return Array(per_shape, dtype, std::move(per));
  double s = 0;
  for (double v : per) s += v;
  return Array::scalar(r == Reduction::mean ? s / count : s, dtype);
}

Tensor reduce_tensor(Tensor per, Reduction r) {
  switch (r) {
    case Reduction::none:
      return per;
    case Reduction::sum:
      return sum(per);
    case Reduction::mean:
      return mean(per);
  }
  return per;
}

Tensor ones_like(Tensor t) { return broadcast_to(scalar_like(t, 1.0), t.shape()); }

OpSample loss_sample(std::string label, std::vector<TensorType> inputs, Attrs attrs,
                     std::vector<std::pair<double, double>> ranges, std::vector<bool> no_grad) {
  OpSample s;
  s.label = std::move(label);
  s.inputs = std::move(inputs);
  s.attrs = std::move(attrs);
  s.ranges = std::move(ranges);
  s.no_grad = std::move(no_grad);
  return s;
}

}  // namespace ops

namespace {

// ---- elementwise losses ----

// One elementwise loss l(x, y) of attributes A (LossAttrs or SmoothL1Attrs): its value, its
// partial derivative w.r.t. operand `wrt`, the graph-op form of l, and the second derivatives
// of d l / d operand[wrt] contracted with `sw` (the scaled cotangent times the outer cotangent),
// as {d/dx, d/dy} (an invalid Tensor for a zero).
template <class A>
struct ElementwiseLoss {
  const char* name;
  const char* summary;
  double (*value)(double x, double y, const A& a);
  double (*grad)(double x, double y, const A& a, int64_t wrt);
  Tensor (*decompose)(Tensor x, Tensor y, const A& a);
  std::pair<Tensor, Tensor> (*second)(Tensor x, Tensor y, const A& a, int64_t wrt, Tensor sw);
  // Input ranges that keep finite differences valid (p inside (0, 1) for binary_cross_entropy).
  std::pair<double, double> x_range{-2.0, 2.0};
  std::pair<double, double> y_range{-2.0, 2.0};
  // Checks an operand value the loss is undefined for; empty when all are valid.
  std::string (*check)(double x, double y) = nullptr;
};

TensorType infer_pair(std::string_view op, std::span<const TensorType> in, Reduction r) {
  ops::check_reduction(op, in, r);
  if (!is_float(in[0].dtype)) shape_fail(op, in, "input must be float");
  if (in[1].dtype != in[0].dtype) shape_fail(op, in, "input and target must have the same dtype");
  if (in[1].shape != in[0].shape) {
    shape_fail(op, in,
               "input and target must have the same shape (no broadcasting: PyTorch warns that "
               "it is likely a mistake)");
  }
  return ops::loss_output_type(in[0].shape, in[0].dtype, r);
}

template <class A>
void check_values(const ElementwiseLoss<A>& loss, const Array& x, const Array& y) {
  if (!loss.check) return;
  for (size_t i = 0; i < x.data.size(); ++i) {
    std::string why = loss.check(x.data[i], y.data[i]);
    if (!why.empty()) {
      throw Error(std::string(loss.name) + ": " + why + " at flat index " + std::to_string(i) +
                  " of input " + x.type().str());
    }
  }
}

// The cotangent's scale per element: itself for none, the scalar (over N for mean) otherwise.
Tensor scaled_cotangent(Tensor ct, Reduction r, const Shape& shape) {
  if (r == Reduction::mean) return broadcast_to(ct / static_cast<double>(numel(shape)), shape);
  return r == Reduction::none ? ct : broadcast_to(ct, shape);
}

template <class A>
void register_elementwise_loss(OpRegistry& r, const ElementwiseLoss<A>& loss,
                               std::vector<OpSample> (*samples)(),
                               std::vector<OpSample> (*backward_samples)()) {
  using BA = LossBackwardAttrs<A>;
  const std::string name = loss.name;
  const std::string backward = name + "_backward";
  r.add({
      .name = name,
      .arity = 2,
      .archetype = Archetype::reduction,
      .infer =
          [name](const Attrs& at, std::span<const TensorType> in) {
            return infer_pair(name, in, at.as<A>().reduction);
          },
      .eval =
          [loss](const Node& n, std::span<const Array* const> in) {
            const A& a = n.attrs.as<A>();
            const Array& x = *in[0];
            const Array& y = *in[1];
            check_values(loss, x, y);
            std::vector<double> per(x.data.size());
            for (size_t i = 0; i < per.size(); ++i) per[i] = loss.value(x.data[i], y.data[i], a);
            return ops::reduce_losses(std::move(per), x.shape, n.type.dtype, a.reduction,
                                      static_cast<double>(x.numel()));
          },
      .vjp =
          [backward](const Node& n, std::span<const Tensor> in, Tensor, Tensor ct) {
            const A& a = n.attrs.as<A>();
            Graph& g = ct.graph();
            return std::vector<Tensor>{g.apply(backward, BA{a, 0}, {in[0], in[1], ct}),
                                       g.apply(backward, BA{a, 1}, {in[0], in[1], ct})};
          },
      .decompose =
          [loss](const Node& n, std::span<const Tensor> in) {
            const A& a = n.attrs.as<A>();
            return ops::reduce_tensor(loss.decompose(in[0], in[1], a), a.reduction);
          },
      .samples = samples,
      .summary = loss.summary,
  });
  r.add({
      .name = backward,
      .arity = 3,
      .archetype = Archetype::pointwise,
      .infer =
          [backward](const Attrs& at, std::span<const TensorType> in) {
            const BA& ba = at.as<BA>();
            TensorType out = infer_pair(backward, in.first(2), ba.forward.reduction);
            if (in[2] != out) shape_fail(backward, in, "the cotangent must be " + out.str());
            if (ba.wrt != 0 && ba.wrt != 1) shape_fail(backward, in, "wrt must be 0 or 1");
            return in[ba.wrt];
          },
      .eval =
          [loss](const Node& n, std::span<const Array* const> in) {
            const BA& ba = n.attrs.as<BA>();
            const Array& x = *in[0];
            const Array& y = *in[1];
            const Array& ct = *in[2];
            const bool mean = ba.forward.reduction == Reduction::mean;
            const auto count = static_cast<double>(x.numel());
            Array out(n.type.shape, n.type.dtype);
            for (size_t i = 0; i < out.data.size(); ++i) {
              double g = loss.grad(x.data[i], y.data[i], ba.forward, ba.wrt) *
                         ops::cotangent_at(ct, static_cast<int64_t>(i));
              out.data[i] = mean ? g / count : g;
            }
            return out;
          },
      .vjp =
          [loss](const Node& n, std::span<const Tensor> in, Tensor, Tensor w_out) {
            const BA& ba = n.attrs.as<BA>();
            const Reduction red = ba.forward.reduction;
            Tensor x = in[0], y = in[1], ct = in[2];
            // Linear in the cotangent: the adjoint contracts w_out with the op at unit cotangent.
            Tensor unit = x.graph().apply(n.op->name, n.attrs, {x, y, ops::ones_like(ct)});
            Tensor contracted = mul(w_out, unit);
            Tensor d_ct = red == Reduction::none ? contracted : sum(contracted);
            Tensor sw = mul(w_out, scaled_cotangent(ct, red, x.shape()));
            auto [d_x, d_y] = loss.second(x, y, ba.forward, ba.wrt, sw);
            return std::vector<Tensor>{d_x, d_y, d_ct};
          },
      .samples = backward_samples,
      .summary = "gradient of " + name + " w.r.t. its input (wrt = 0) or target (wrt = 1)",
      .internal = true,
  });
}

double sign(double v) { return v > 0 ? 1.0 : (v < 0 ? -1.0 : 0.0); }
double flip(int64_t wrt) { return wrt == 0 ? 1.0 : -1.0; }

// d l / d y = -d l / d x for the losses of x - y: second derivatives are {q, -q} times that sign.
std::pair<Tensor, Tensor> difference_pair(Tensor q, int64_t wrt) {
  if (wrt == 1) q = neg(q);
  return {q, neg(q)};
}

const ElementwiseLoss<LossAttrs> kMse{
    .name = "mse_loss",
    .summary = "mean squared error (x - y)^2, reduced by none/mean/sum",
    .value = [](double x, double y, const LossAttrs&) { return (x - y) * (x - y); },
    .grad = [](double x, double y, const LossAttrs&,
               int64_t wrt) { return flip(wrt) * 2.0 * (x - y); },
    .decompose =
        [](Tensor x, Tensor y, const LossAttrs&) {
          Tensor d = sub(x, y);
          return mul(d, d);
        },
    .second = [](Tensor, Tensor, const LossAttrs&, int64_t wrt,
                 Tensor sw) { return difference_pair(sw * 2.0, wrt); },
};

// The gradient of |x - y| is sign(x - y), 0 where x == y (as PyTorch's sgn).
const ElementwiseLoss<LossAttrs> kL1{
    .name = "l1_loss",
    .summary = "absolute error |x - y|, reduced by none/mean/sum",
    .value = [](double x, double y, const LossAttrs&) { return std::abs(x - y); },
    .grad = [](double x, double y, const LossAttrs&,
               int64_t wrt) { return flip(wrt) * sign(x - y); },
    .decompose = [](Tensor x, Tensor y, const LossAttrs&) { return abs(sub(x, y)); },
    .second = [](Tensor, Tensor, const LossAttrs&, int64_t,
                 Tensor) { return std::pair<Tensor, Tensor>{}; },
};

// PyTorch: 0.5 z^2 / beta where z = |x - y| < beta, else z - 0.5 beta; beta = 0 is l1_loss
// (including its gradient 0 at x == y). The gradient is clamped to ±1 from |x - y| >= beta on.
const ElementwiseLoss<SmoothL1Attrs> kSmoothL1{
    .name = "smooth_l1_loss",
    .summary = "Huber-like loss: quadratic below beta, linear above (beta = 0: l1_loss)",
    .value =
        [](double x, double y, const SmoothL1Attrs& a) {
          const double z = std::abs(x - y);
          if (a.beta == 0.0) return z;
          return z < a.beta ? 0.5 * z * z / a.beta : z - 0.5 * a.beta;
        },
    .grad =
        [](double x, double y, const SmoothL1Attrs& a, int64_t wrt) {
          const double d = x - y;
          double g;
          if (a.beta == 0.0)
            g = sign(d);
          else if (d <= -a.beta)
            g = -1.0;
          else if (d >= a.beta)
            g = 1.0;
          else
            g = d / a.beta;
          return flip(wrt) * g;
        },
    .decompose =
        [](Tensor x, Tensor y, const SmoothL1Attrs& a) {
          Tensor z = abs(sub(x, y));
          if (a.beta == 0.0) return z;
          Tensor beta = ops::scalar_like(x, a.beta);
          return where(lt(z, beta), mul(z, z) * 0.5 / beta, z - beta * 0.5);
        },
    .second =
        [](Tensor x, Tensor y, const SmoothL1Attrs& a, int64_t wrt, Tensor sw) {
          if (a.beta == 0.0) return std::pair<Tensor, Tensor>{};
          Tensor inside = lt(abs(sub(x, y)), ops::scalar_like(x, a.beta));
          return difference_pair(mul(sw, inside) / a.beta, wrt);
        },
};

// PyTorch clamps both logs at -100 and computes log(1 - p) as log1p(-p); its gradient divides
// by max(p (1 - p), EPSILON), and the target's gradient is -logit(p). EPSILON is a float 1e-12
// in ATen's Loss.cpp, which matters where p is 0 or 1.
constexpr double kBceEps = static_cast<double>(1e-12F);
const ElementwiseLoss<LossAttrs> kBce{
    .name = "binary_cross_entropy",
    .summary = "binary cross-entropy of probabilities p in [0, 1] (logs clamped at -100)",
    .value =
        [](double p, double y, const LossAttrs&) {
          return (y - 1.0) * std::max(std::log1p(-p), -100.0) - y * std::max(std::log(p), -100.0);
        },
    .grad =
        [](double p, double y, const LossAttrs&, int64_t wrt) {
          if (wrt == 1) return -std::log(p / (1.0 - p));
          return (p - y) / std::max((1.0 - p) * p, kBceEps);
        },
    .decompose =
        [](Tensor p, Tensor y, const LossAttrs&) {
          Tensor floor = ops::scalar_like(p, -100.0);
          Tensor log_p = maximum(log(p), floor);
          Tensor log_q = maximum(log(1.0 - p), floor);
          return neg(add(mul(y, log_p), mul(1.0 - y, log_q)));
        },
    .second =
        [](Tensor p, Tensor y, const LossAttrs&, int64_t wrt, Tensor sw) {
          Tensor pq = mul(p, 1.0 - p);
          if (wrt == 1) return std::pair<Tensor, Tensor>{neg(div(sw, pq)), Tensor{}};
          // h = (p - y) / D with D = max(p (1 - p), eps): dh/dp = (D - (p - y) D') / D^2.
          Tensor eps = ops::scalar_like(p, kBceEps);
          Tensor d = maximum(pq, eps);
          Tensor d_prime = mul(gt(pq, eps), 1.0 - p * 2.0);
          Tensor dh_dp = div(sub(d, mul(sub(p, y), d_prime)), mul(d, d));
          return std::pair<Tensor, Tensor>{mul(sw, dh_dp), neg(div(sw, d))};
        },
    .x_range = {0.05, 0.95},
    .y_range = {0.0, 1.0},
    .check = [](double p, double) -> std::string {
      if (p >= 0.0 && p <= 1.0) return {};
      return "input value " + std::to_string(p) + " is outside [0, 1]";
    },
};

// PyTorch's stable form: (1 - y) x + m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0).
const ElementwiseLoss<LossAttrs> kBceLogits{
    .name = "binary_cross_entropy_with_logits",
    .summary = "binary cross-entropy of logits, sigmoid folded in stably",
    .value =
        [](double x, double y, const LossAttrs&) {
          const double m = std::max(-x, 0.0);
          return (1.0 - y) * x + m + std::log(std::exp(-m) + std::exp(-x - m));
        },
    .grad =
        [](double x, double y, const LossAttrs&, int64_t wrt) {
          if (wrt == 1) return -x;
          return 1.0 / (1.0 + std::exp(-x)) - y;
        },
    .decompose =
        [](Tensor x, Tensor y, const LossAttrs&) {
          Tensor m = maximum(neg(x), ops::scalar_like(x, 0.0));
          return add(add(mul(1.0 - y, x), m), log(add(exp(neg(m)), exp(sub(neg(x), m)))));
        },
    .second =
        [](Tensor x, Tensor, const LossAttrs&, int64_t wrt, Tensor sw) {
          if (wrt == 1) return std::pair<Tensor, Tensor>{neg(sw), Tensor{}};
          Tensor s = sigmoid(x);
          return std::pair<Tensor, Tensor>{mul(sw, mul(s, 1.0 - s)), neg(sw)};
        },
    .x_range = {-4.0, 4.0},
    .y_range = {0.0, 1.0},
};

// ---- samples ----

std::string attrs_label(const LossAttrs& a) { return reduction_name(a.reduction); }
std::string attrs_label(const SmoothL1Attrs& a) {
  std::ostringstream os;
  os << reduction_name(a.reduction) << "_beta" << a.beta;
  return os.str();
}

template <class A>
std::vector<OpSample> pair_samples(const ElementwiseLoss<A>& loss, const std::vector<A>& attrs) {
  const Shape shapes[] = {{3, 4}, {2, 3, 2, 2}, {5}, {}, {1, 1}};
  std::vector<OpSample> out;
  for (const A& a : attrs) {
    for (const Shape& s : shapes) {
      std::string label = attrs_label(a) + "_" + (s.empty() ? "scalar" : shape_str(s));
      out.push_back(ops::loss_sample(label, {{s, DType::f32}, {s, DType::f32}}, a,
                                     {loss.x_range, loss.y_range}));
    }
  }
  return out;
}

template <class A>
std::vector<OpSample> pair_backward_samples(const ElementwiseLoss<A>& loss,
                                            const std::vector<A>& attrs) {
  const Shape shapes[] = {{3, 4}, {2, 3, 2}, {}};
  std::vector<OpSample> out;
  for (const A& a : attrs) {
    for (int64_t wrt = 0; wrt < 2; ++wrt) {
      const Shape& s = shapes[out.size() % 3];
      TensorType t{s, DType::f32};
      std::string label = attrs_label(a) + "_wrt" + std::to_string(wrt) + "_" +
                          (s.empty() ? "scalar" : shape_str(s));
      out.push_back(ops::loss_sample(
          label, {t, t, ops::loss_output_type(s, DType::f32, a.reduction)},
          LossBackwardAttrs<A>{a, wrt}, {loss.x_range, loss.y_range, {-1.0, 1.0}}));
    }
  }
  return out;
}

const std::vector<LossAttrs> kReductions{{Reduction::none}, {Reduction::mean}, {Reduction::sum}};
// Dyadic betas keep the decomposition's f32 constants exact; 0 is l1_loss.
const std::vector<SmoothL1Attrs> kSmoothL1Attrs{
    {Reduction::none, 1.0}, {Reduction::mean, 0.5}, {Reduction::sum, 2.0}, {Reduction::mean, 0.0}};

}  // namespace

void register_loss_ops(OpRegistry& r) {
  register_elementwise_loss(
      r, kMse, [] { return pair_samples(kMse, kReductions); },
      [] { return pair_backward_samples(kMse, kReductions); });
  register_elementwise_loss(
      r, kL1, [] { return pair_samples(kL1, kReductions); },
      [] { return pair_backward_samples(kL1, kReductions); });
  register_elementwise_loss(
      r, kSmoothL1, [] { return pair_samples(kSmoothL1, kSmoothL1Attrs); },
      [] { return pair_backward_samples(kSmoothL1, kSmoothL1Attrs); });
  register_elementwise_loss(
      r, kBce, [] { return pair_samples(kBce, kReductions); },
      [] { return pair_backward_samples(kBce, kReductions); });
  register_elementwise_loss(
      r, kBceLogits, [] { return pair_samples(kBceLogits, kReductions); },
      [] { return pair_backward_samples(kBceLogits, kReductions); });
  ops::register_class_loss_ops(r);
}

}  // namespace mn
