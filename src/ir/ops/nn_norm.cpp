// layer_norm, rms_norm and group_norm: statistics over a contiguous block of elements (the
// trailing axes, or one sample's group of channels), then a per-element affine map.
#include <cmath>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/nn.h"
#include "ir/ops/nn_util.h"

namespace mn {

namespace ops {
namespace {

// Operands present: x, then gamma and beta as the flags say.
size_t expected_operands(bool has_gamma, bool has_beta) {
  return 1 + (has_gamma ? 1 : 0) + (has_beta ? 1 : 0);
}

// Mean and biased variance of n contiguous values (two passes: no cancellation).
std::pair<double, double> mean_var(const double* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const double m = s / static_cast<double>(n);
  double v = 0.0;
  for (int64_t i = 0; i < n; ++i) v += (x[i] - m) * (x[i] - m);
  return {m, v / static_cast<double>(n)};
}

// ---- layer_norm and rms_norm: trailing axes ----

TensorType infer_trailing_norm(std::string_view op, std::span<const TensorType> in,
                               int64_t normalized_dims, bool has_gamma, bool has_beta) {
  if (in.size() != expected_operands(has_gamma, has_beta)) {
    shape_fail(
        op, in,
        std::string("operands x") + (has_gamma ? ", gamma" : "") + (has_beta ? ", beta" : ""));
  }
  require_same_float(op, in);
  const TensorType& x = in[0];
  if (normalized_dims < 1 || normalized_dims > x.rank()) {
    shape_fail(op, in, "normalized_dims " + std::to_string(normalized_dims) + " in [1, rank of x]");
  }
  const Shape trailing(x.shape.end() - normalized_dims, x.shape.end());
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].shape != trailing) {
      shape_fail(op, in, "gamma/beta of the normalized shape " + shape_str(trailing));
    }
  }
  return x;
}

std::vector<int64_t> trailing_axes(const Tensor& x, int64_t k) {
  return axis_range(x.rank() - k, x.rank());
}

struct LayerNormParts {
  Tensor xhat, rstd;
};
LayerNormParts layer_norm_parts(Tensor x, const std::vector<int64_t>& axes, double eps) {
  Tensor xc = x - mean(x, axes, true);
  Tensor rstd = rsqrt(mean(xc * xc, axes, true) + eps);
  return {xc * rstd, rstd};
}
LayerNormParts rms_norm_parts(Tensor x, const std::vector<int64_t>& axes, double eps) {
  Tensor rstd = rsqrt(mean(x * x, axes, true) + eps);
  return {x * rstd, rstd};
}

Tensor layer_norm_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<LayerNormAttrs>();
  Tensor y = layer_norm_parts(in[0], trailing_axes(in[0], a.normalized_dims), a.eps).xhat;
  size_t next = 1;
  if (a.has_gamma) y = y * in[next++];
  if (a.has_beta) y = y + in[next++];
  return y;
}

std::vector<Tensor> layer_norm_vjp(const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
  const auto& a = n.attrs.as<LayerNormAttrs>();
  const auto axes = trailing_axes(in[0], a.normalized_dims);
  auto [xhat, rstd] = layer_norm_parts(in[0], axes, a.eps);
  std::vector<Tensor> grads(in.size());
  size_t next = 1;
  Tensor gx = g;
  // Shapes are copied before building ops: Tensor::shape() refers into the graph's node list,
  // which appending nodes may reallocate.
  if (a.has_gamma) {
    const Shape shape = in[next].shape();
    gx = g * in[next];
    grads[next] = sum_to(g * xhat, shape);
    ++next;
  }
  if (a.has_beta) {
    const Shape shape = in[next].shape();
    grads[next] = sum_to(g, shape);
  }
  grads[0] = normalized_input_grad(gx, xhat, rstd, axes, true);
  return grads;
}

Tensor rms_norm_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<RmsNormAttrs>();
  Tensor y = rms_norm_parts(in[0], trailing_axes(in[0], a.normalized_dims), a.eps).xhat;
  return a.has_gamma ? y * in[1] : y;
}

std::vector<Tensor> rms_norm_vjp(const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
  const auto& a = n.attrs.as<RmsNormAttrs>();
  const auto axes = trailing_axes(in[0], a.normalized_dims);
  auto [xhat, rstd] = rms_norm_parts(in[0], axes, a.eps);
  std::vector<Tensor> grads(in.size());
  Tensor gx = g;
  if (a.has_gamma) {
    const Shape shape = in[1].shape();  // copied first, as in layer_norm_vjp
    gx = g * in[1];
    grads[1] = sum_to(g * xhat, shape);
  }
  grads[0] = normalized_input_grad(gx, xhat, rstd, axes, false);
  return grads;
}

// Shared reference loop: rows of `row` contiguous elements; gamma/beta indexed by position in
// the row. eps is used as x's dtype holds it, like the graph scalar of the decomposition and vjp
// (and a GPU kernel's constant).
Array eval_trailing_norm(const Node& n, std::span<const Array* const> in, int64_t normalized_dims,
                         double eps, bool centered, bool has_gamma, bool has_beta) {
  const Array& x = *in[0];
  const Array* gamma = has_gamma ? in[1] : nullptr;
  const Array* beta = has_beta ? in[has_gamma ? 2 : 1] : nullptr;
  const int64_t row = numel(std::span(x.shape).last(static_cast<size_t>(normalized_dims)));
  Array out(n.type.shape, n.type.dtype);
  for (int64_t r = 0; r * row < x.numel(); ++r) {
    const double* px = x.data.data() + r * row;
    double* py = out.data.data() + r * row;
    double m = 0.0, var = 0.0;
    if (centered) {
      std::tie(m, var) = mean_var(px, row);
    } else {
      for (int64_t j = 0; j < row; ++j) var += px[j] * px[j];
      var /= static_cast<double>(row);
    }
    const double rstd = 1.0 / std::sqrt(var + round_to_dtype(eps, x.dtype));
    for (int64_t j = 0; j < row; ++j) {
      double v = (px[j] - m) * rstd;
      if (gamma) v *= gamma->data[j];
      if (beta) v += beta->data[j];
      py[j] = v;
    }
  }
  return out;
}

std::vector<OpSample> layer_norm_samples() {
  auto s = [](std::string label, Shape x, int64_t k, bool has_gamma, bool has_beta) {
    OpSample o{.label = std::move(label),
               .inputs = {{x, DType::f32}},
               .attrs = LayerNormAttrs{k, 1e-5, has_gamma, has_beta},
               .ranges = {{-2.0, 2.0}},
               .no_grad = {false}};
    const Shape trailing(x.end() - k, x.end());
    if (has_gamma) {
      o.inputs.push_back({trailing, DType::f32});
      o.ranges.push_back({0.5, 1.5});
      o.no_grad.push_back(false);
    }
    if (has_beta) {
      o.inputs.push_back({trailing, DType::f32});
      o.ranges.push_back({-1.0, 1.0});
      o.no_grad.push_back(false);
    }
    return o;
  };
  return {s("affine", {3, 4}, 1, true, true),
          s("two_dims", {2, 3, 4}, 2, true, true),
          s("plain", {2, 5}, 1, false, false),
          s("gamma_only", {4, 3}, 1, true, false),
          s("beta_only_batch", {2, 1, 3}, 1, false, true),
          s("whole_vector", {6}, 1, true, true)};
}

std::vector<OpSample> rms_norm_samples() {
  auto s = [](std::string label, Shape x, int64_t k, bool has_gamma) {
    OpSample o{.label = std::move(label),
               .inputs = {{x, DType::f32}},
               .attrs = RmsNormAttrs{k, 1e-6, has_gamma},
               .ranges = {{-2.0, 2.0}},
               .no_grad = {false}};
    if (has_gamma) {
      o.inputs.push_back({Shape(x.end() - k, x.end()), DType::f32});
      o.ranges.push_back({0.5, 1.5});
      o.no_grad.push_back(false);
    }
    return o;
  };
  return {s("gamma", {3, 4}, 1, true), s("two_dims", {2, 3, 4}, 2, true),
          s("plain", {2, 2, 5}, 1, false), s("whole_vector", {8}, 1, true)};
}

// ---- group_norm ----

TensorType infer_group_norm(std::span<const TensorType> in, const GroupNormAttrs& a) {
  constexpr std::string_view op = "group_norm";
  if (in.size() != expected_operands(a.has_gamma, a.has_beta)) {
    shape_fail(
        op, in,
        std::string("operands x") + (a.has_gamma ? ", gamma" : "") + (a.has_beta ? ", beta" : ""));
  }
  require_same_float(op, in);
  const TensorType& x = in[0];
  if (x.rank() < 2) shape_fail(op, in, "x of shape [N, C, ...]");
  const int64_t c = x.shape[1];
  if (a.groups < 1 || c % a.groups != 0) {
    shape_fail(op, in,
               "groups (" + std::to_string(a.groups) + ") dividing the channels (" +
                   std::to_string(c) + ")");
  }
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].shape != Shape{c})
      shape_fail(op, in, "gamma/beta of shape [C] = [" + std::to_string(c) + "]");
  }
  return x;
}

// x viewed as [N, groups, rest]: one row per (sample, group).
Shape grouped_shape(const Tensor& x, int64_t groups) {
  return {x.dim(0), groups, x.numel() / (x.dim(0) * groups)};
}
// A per-channel [C] tensor shaped to broadcast against x [N, C, ...].
Tensor channel_view(Tensor t, int rank) {
  Shape s(static_cast<size_t>(rank - 1), 1);
  s[0] = t.dim(0);
  return reshape(t, s);
}
// Every axis but the channel axis.
std::vector<int64_t> non_channel_axes(int rank) {
  std::vector<int64_t> axes{0};
  for (int64_t a = 2; a < rank; ++a) axes.push_back(a);
  return axes;
}

Tensor group_norm_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<GroupNormAttrs>();
  Tensor x = in[0];
  const Shape shape = x.shape();
  Tensor xr = reshape(x, grouped_shape(x, a.groups));
  Tensor y = reshape(layer_norm_parts(xr, {2}, a.eps).xhat, shape);
  size_t next = 1;
  if (a.has_gamma) y = y * channel_view(in[next++], x.rank());
  if (a.has_beta) y = y + channel_view(in[next++], x.rank());
  return y;
}

std::vector<Tensor> group_norm_vjp(const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
  const auto& a = n.attrs.as<GroupNormAttrs>();
  Tensor x = in[0];
  const Shape shape = x.shape();
  const Shape gs = grouped_shape(x, a.groups);
  auto [xhat_r, rstd] = layer_norm_parts(reshape(x, gs), {2}, a.eps);
  Tensor xhat = reshape(xhat_r, shape);
  const auto axes = non_channel_axes(x.rank());
  std::vector<Tensor> grads(in.size());
  size_t next = 1;
  Tensor gx = g;
  if (a.has_gamma) {
    gx = g * channel_view(in[next], x.rank());
    grads[next] = sum(g * xhat, axes);
    ++next;
  }
  if (a.has_beta) grads[next] = sum(g, axes);
  grads[0] = reshape(normalized_input_grad(reshape(gx, gs), xhat_r, rstd, {2}, true), shape);
  return grads;
}

Array eval_group_norm(const Node& n, std::span<const Array* const> in) {
  const auto& a = n.attrs.as<GroupNormAttrs>();
  const Array& x = *in[0];
  const Array* gamma = a.has_gamma ? in[1] : nullptr;
  const Array* beta = a.has_beta ? in[a.has_gamma ? 2 : 1] : nullptr;
  const int64_t batch = x.shape[0], channels = x.shape[1];
  const int64_t spatial = x.numel() / (batch * channels);
  const int64_t per_group = channels / a.groups;
  const int64_t block = per_group * spatial;
  Array out(n.type.shape, n.type.dtype);
  for (int64_t b = 0; b < batch * a.groups; ++b) {
    const int64_t first_channel = (b % a.groups) * per_group;
    const double* px = x.data.data() + b * block;
    double* py = out.data.data() + b * block;
    auto [m, var] = mean_var(px, block);
    const double rstd = 1.0 / std::sqrt(var + round_to_dtype(a.eps, x.dtype));
    for (int64_t j = 0; j < block; ++j) {
      const int64_t c = first_channel + j / spatial;
      double v = (px[j] - m) * rstd;
      if (gamma) v *= gamma->data[c];
      if (beta) v += beta->data[c];
      py[j] = v;
    }
  }
  return out;
}

std::vector<OpSample> group_norm_samples() {
  auto s = [](std::string label, Shape x, int64_t groups, bool affine) {
    OpSample o{.label = std::move(label),
               .inputs = {{x, DType::f32}},
               .attrs = GroupNormAttrs{groups, 1e-5, affine, affine},
               .ranges = {{-2.0, 2.0}},
               .no_grad = {false}};
    if (affine) {
      o.inputs.push_back({{x[1]}, DType::f32});
      o.inputs.push_back({{x[1]}, DType::f32});
      o.ranges.push_back({0.5, 1.5});
      o.ranges.push_back({-1.0, 1.0});
      o.no_grad.insert(o.no_grad.end(), {false, false});
    }
    return o;
  };
  return {s("two_groups_1d", {2, 4, 3}, 2, true), s("three_groups_2d", {2, 6, 2, 2}, 3, true),
          s("no_spatial", {3, 4}, 2, true), s("one_group_plain", {1, 4, 5}, 1, false),
          s("instance_like", {2, 3, 4}, 3, true)};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "layer_norm",
      .arity = -1,
      .archetype = Archetype::reduction,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            const auto& a = attrs.as<LayerNormAttrs>();
            return infer_trailing_norm("layer_norm", in, a.normalized_dims, a.has_gamma,
                                       a.has_beta);
          },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const auto& a = n.attrs.as<LayerNormAttrs>();
            return eval_trailing_norm(n, in, a.normalized_dims, a.eps, true, a.has_gamma,
                                      a.has_beta);
          },
      .vjp = layer_norm_vjp,
      .decompose = layer_norm_decompose,
      .samples = layer_norm_samples,
      .summary = "(x - mean) * rsqrt(var + eps) * gamma + beta over the trailing axes",
  });
  r.add(OpDef{
      .name = "rms_norm",
      .arity = -1,
      .archetype = Archetype::reduction,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            const auto& a = attrs.as<RmsNormAttrs>();
            return infer_trailing_norm("rms_norm", in, a.normalized_dims, a.has_gamma, false);
          },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const auto& a = n.attrs.as<RmsNormAttrs>();
            return eval_trailing_norm(n, in, a.normalized_dims, a.eps, false, a.has_gamma, false);
          },
      .vjp = rms_norm_vjp,
      .decompose = rms_norm_decompose,
      .samples = rms_norm_samples,
      .summary = "x * rsqrt(mean(x^2) + eps) * gamma over the trailing axes",
  });
  r.add(OpDef{
      .name = "group_norm",
      .arity = -1,
      .archetype = Archetype::reduction,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            return infer_group_norm(in, attrs.as<GroupNormAttrs>());
          },
      .eval = eval_group_norm,
      .vjp = group_norm_vjp,
      .decompose = group_norm_decompose,
      .samples = group_norm_samples,
      .summary = "normalization per (sample, group of channels), then per-channel gamma, beta",
  });
}

}  // namespace ops

namespace {
std::vector<Tensor> present(Tensor x, Tensor a, Tensor b) {
  std::vector<Tensor> v{x};
  if (a.valid()) v.push_back(a);
  if (b.valid()) v.push_back(b);
  return v;
}
}  // namespace

Tensor layer_norm(Tensor x, Tensor gamma, Tensor beta, int64_t normalized_dims, double eps) {
  ops::require_tensor(x, "layer_norm", "x");
  return x.graph().apply("layer_norm",
                         LayerNormAttrs{normalized_dims, eps, gamma.valid(), beta.valid()},
                         present(x, gamma, beta));
}

Tensor rms_norm(Tensor x, Tensor gamma, double eps, int64_t normalized_dims) {
  ops::require_tensor(x, "rms_norm", "x");
  return x.graph().apply("rms_norm", RmsNormAttrs{normalized_dims, eps, gamma.valid()},
                         present(x, gamma, {}));
}

Tensor group_norm(Tensor x, int64_t groups, Tensor gamma, Tensor beta, double eps) {
  ops::require_tensor(x, "group_norm", "x");
  return x.graph().apply("group_norm", GroupNormAttrs{groups, eps, gamma.valid(), beta.valid()},
                         present(x, gamma, beta));
}

}  // namespace mn
