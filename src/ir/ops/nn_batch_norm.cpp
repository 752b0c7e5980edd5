// batch_norm: per-channel normalization of x [N, C, ...]. The op normalizes; the public function
// adds the running-statistics update as ordinary graph ops (mean, variance, arithmetic) so it
// fuses with the rest of the step and needs no second output.
#include <cmath>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/nn.h"
#include "ir/ops/nn_util.h"

namespace mn {

namespace ops {
namespace {

constexpr std::string_view kOp = "batch_norm";

// Where each optional operand sits in the operand list.
struct BatchNormSlots {
  int gamma = -1, beta = -1, mean = -1, var = -1;
  size_t count = 1;
};
BatchNormSlots slots(const BatchNormAttrs& a) {
  BatchNormSlots s;
  int next = 1;
  if (a.has_gamma) s.gamma = next++;
  if (a.has_beta) s.beta = next++;
  if (!a.training) {
    s.mean = next++;
    s.var = next++;
  }
  s.count = static_cast<size_t>(next);
  return s;
}

TensorType infer_batch_norm(std::span<const TensorType> in, const BatchNormAttrs& a) {
  const BatchNormSlots s = slots(a);
  if (in.size() != s.count) {
    shape_fail(kOp, in,
               std::string("operands x") + (a.has_gamma ? ", gamma" : "") +
                   (a.has_beta ? ", beta" : "") +
                   (a.training ? "" : ", running_mean, running_var") +
                   (a.training ? " (training)" : " (eval)"));
  }
  require_same_float(kOp, in);
  const TensorType& x = in[0];
  if (x.rank() < 2) shape_fail(kOp, in, "x of shape [N, C, ...]");
  const int64_t c = x.shape[1];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].shape != Shape{c}) {
      shape_fail(kOp, in, "per-channel operands of shape [C] = [" + std::to_string(c) + "]");
    }
  }
  if (a.training && x.numel() / c < 2) {
    shape_fail(kOp, in, "more than one value per channel when training");
  }
  return x;
}

Shape channel_shape(const Tensor& x) {
  Shape s(static_cast<size_t>(x.rank() - 1), 1);
  s[0] = x.dim(1);
  return s;
}
std::vector<int64_t> reduced_axes(int rank) {
  std::vector<int64_t> axes{0};
  for (int64_t a = 2; a < rank; ++a) axes.push_back(a);
  return axes;
}

struct Normalized {
  Tensor xhat, rstd;
};
// xhat and rstd in graph ops, with rstd shaped [C, 1, ...] to broadcast against x.
Normalized normalized(const BatchNormAttrs& a, std::span<const Tensor> in) {
  const BatchNormSlots s = slots(a);
  Tensor x = in[0];
  if (a.training) {
    const auto axes = reduced_axes(x.rank());
    Tensor xc = x - mean(x, axes, true);
    Tensor rstd = rsqrt(mean(xc * xc, axes, true) + a.eps);
    return {xc * rstd, rstd};
  }
  Tensor rstd = rsqrt(reshape(in[s.var], channel_shape(x)) + a.eps);
  return {(x - reshape(in[s.mean], channel_shape(x))) * rstd, rstd};
}

Tensor batch_norm_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<BatchNormAttrs>();
  const BatchNormSlots s = slots(a);
  Tensor y = normalized(a, in).xhat;
  if (a.has_gamma) y = y * reshape(in[s.gamma], channel_shape(in[0]));
  if (a.has_beta) y = y + reshape(in[s.beta], channel_shape(in[0]));
  return y;
}

std::vector<Tensor> batch_norm_vjp(const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
  const auto& a = n.attrs.as<BatchNormAttrs>();
  const BatchNormSlots s = slots(a);
  const auto axes = reduced_axes(in[0].rank());
  auto [xhat, rstd] = normalized(a, in);
  std::vector<Tensor> grads(in.size());  // running statistics keep an invalid (no) gradient
  Tensor gx = g;
  if (a.has_gamma) {
    gx = g * reshape(in[s.gamma], channel_shape(in[0]));
    grads[s.gamma] = sum(g * xhat, axes);
  }
  if (a.has_beta) grads[s.beta] = sum(g, axes);
  // Training: the batch statistics depend on x; eval: the running ones are constants.
  grads[0] = a.training ? normalized_input_grad(gx, xhat, rstd, axes, true) : gx * rstd;
  return grads;
}

Array eval_batch_norm(const Node& n, std::span<const Array* const> in) {
  const auto& a = n.attrs.as<BatchNormAttrs>();
  const BatchNormSlots s = slots(a);
  const Array& x = *in[0];
  const int64_t batch = x.shape[0], channels = x.shape[1];
  const int64_t spatial = x.numel() / (batch * channels);
  const double count = static_cast<double>(batch * spatial);
  Array out(n.type.shape, n.type.dtype);
  for (int64_t c = 0; c < channels; ++c) {
    auto at = [&](int64_t b, int64_t j) { return (b * channels + c) * spatial + j; };
    double m = 0.0, var = 0.0;
    if (a.training) {
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < spatial; ++j) m += x.data[at(b, j)];
      }
      m /= count;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = 0; j < spatial; ++j)
          var += (x.data[at(b, j)] - m) * (x.data[at(b, j)] - m);
      }
      var /= count;
    } else {
      m = in[s.mean]->data[c];
      var = in[s.var]->data[c];
    }
    const double rstd = 1.0 / std::sqrt(var + round_to_dtype(a.eps, x.dtype));  // as a graph scalar
    const double scale = a.has_gamma ? in[s.gamma]->data[c] : 1.0;
    const double shift = a.has_beta ? in[s.beta]->data[c] : 0.0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < spatial; ++j) {
        out.data[at(b, j)] = (x.data[at(b, j)] - m) * rstd * scale + shift;
      }
    }
  }
  return out;
}

std::vector<OpSample> batch_norm_samples() {
  auto s = [](std::string label, Shape x, bool training, bool affine) {
    OpSample o{.label = std::move(label),
               .inputs = {{x, DType::f32}},
               .attrs = BatchNormAttrs{training, 1e-5, affine, affine},
               .ranges = {{-2.0, 2.0}},
               .no_grad = {false}};
    const TensorType per_channel{{x[1]}, DType::f32};
    if (affine) {
      o.inputs.insert(o.inputs.end(), {per_channel, per_channel});
      o.ranges.insert(o.ranges.end(), {{0.5, 1.5}, {-1.0, 1.0}});
      o.no_grad.insert(o.no_grad.end(), {false, false});
    }
    if (!training) {
      o.inputs.insert(o.inputs.end(), {per_channel, per_channel});
      o.ranges.insert(o.ranges.end(), {{-0.5, 0.5}, {0.5, 1.5}});
      o.no_grad.insert(o.no_grad.end(), {true, true});
    }
    return o;
  };
  return {s("train_2d", {4, 3}, true, true), s("train_3d", {2, 3, 4}, true, true),
          s("train_4d_plain", {2, 2, 2, 3}, true, false), s("eval_3d", {3, 4, 2}, false, true),
          s("eval_2d_plain", {2, 3}, false, false)};
}

}  // namespace

void register_batch_norm_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "batch_norm",
      .arity = -1,
      .archetype = Archetype::reduction,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            return infer_batch_norm(in, attrs.as<BatchNormAttrs>());
          },
      .eval = eval_batch_norm,
      .vjp = batch_norm_vjp,
      .decompose = batch_norm_decompose,
      .samples = batch_norm_samples,
      .summary = "per-channel (x - mean) * rsqrt(var + eps) * gamma + beta; batch statistics "
                 "when training, running ones (operands) in eval",
  });
}

}  // namespace ops

BatchNormResult batch_norm(Tensor x, Tensor gamma, Tensor beta, Tensor running_mean,
                           Tensor running_var, bool training, double momentum, double eps) {
  ops::require_tensor(x, "batch_norm", "x");
  if (!training) {
    ops::require_tensor(running_mean, "batch_norm (eval)", "running_mean");
    ops::require_tensor(running_var, "batch_norm (eval)", "running_var");
  }
  if (running_mean.valid() != running_var.valid()) {
    throw Error("batch_norm: running_mean and running_var must be given together");
  }
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    throw Error("batch_norm: momentum must be in [0, 1], got " + std::to_string(momentum));
  }
  std::vector<Tensor> operands{x};
  if (gamma.valid()) operands.push_back(gamma);
  if (beta.valid()) operands.push_back(beta);
  if (!training) operands.insert(operands.end(), {running_mean, running_var});
  Graph& g = x.graph();
  Tensor y =
      g.apply("batch_norm", BatchNormAttrs{training, eps, gamma.valid(), beta.valid()}, operands);
  if (!training || !running_mean.valid()) return {y, running_mean, running_var};

  // The op accepted x, so x is [N, C, ...] with running statistics checked here against [C].
  for (const Tensor* t : {&running_mean, &running_var}) {
    if (t->shape() != Shape{x.dim(1)} || t->dtype() != x.dtype()) {
      throw ShapeError("batch_norm: running statistics must be " +
                       TensorType{{x.dim(1)}, x.dtype()}.str() + ", got " + t->type().str());
    }
  }
  // PyTorch's update: the biased variance normalizes, the unbiased one is tracked.
  std::vector<int64_t> axes{0};
  for (int64_t a = 2; a < x.rank(); ++a) axes.push_back(a);
  Tensor xs = stop_gradient(x);
  Tensor new_mean = running_mean * (1.0 - momentum) + mean(xs, axes) * momentum;
  Tensor new_var = running_var * (1.0 - momentum) + variance(xs, axes, false, 1) * momentum;
  return {y, stop_gradient(new_mean), stop_gradient(new_var)};
}

}  // namespace mn
