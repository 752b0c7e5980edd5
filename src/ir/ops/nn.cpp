// softmax, log_softmax and dropout, and the registration of the whole nn family (the
// normalizations live in nn_norm.cpp and nn_batch_norm.cpp).
#include "ir/ops/nn.h"

#include <cmath>
#include <limits>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"
#include "ir/ops/nn_util.h"
#include "ir/random.h"

namespace mn {

namespace ops {

Tensor normalized_input_grad(Tensor gx, Tensor xhat, Tensor rstd, const std::vector<int64_t>& axes,
                             bool centered) {
  Tensor inner = gx - xhat * mean(gx * xhat, axes, true);
  if (centered) inner = inner - mean(gx, axes, true);
  return rstd * inner;
}

// No stop_gradient on the max: the result does not depend on it, and this is the form exporters
// write (ReduceMax, Sub, Exp, ReduceSum, Div), which the optimizer should recognize.
Tensor softmax_primitive(Tensor x, int64_t axis) {
  Tensor e = exp(x - max(x, {axis}, true));
  return e / sum(e, {axis}, true);
}
Tensor log_softmax_primitive(Tensor x, int64_t axis) {
  Tensor shifted = x - max(x, {axis}, true);
  return shifted - log(sum(exp(shifted), {axis}, true));
}

namespace {

TensorType infer_softmax(std::string_view op, const Attrs& attrs, std::span<const TensorType> in) {
  if (!is_float(in[0].dtype)) shape_fail(op, in, "a float operand");
  const int64_t axis = attrs.as<SoftmaxAttrs>().axis;
  if (in[0].rank() == 0 || axis < -in[0].rank() || axis >= in[0].rank()) {
    shape_fail(op, in, "axis " + std::to_string(axis) + " within the operand's rank");
  }
  return in[0];
}

// Row-wise evaluation along the axis: f(row values in, row values out, n) on a contiguous copy,
// so strided axes cost one gather and one scatter per row.
template <class F>
Array eval_rows(const Node& node, const Array& x, F&& f) {
  const int axis = normalize_axis(node.attrs.as<SoftmaxAttrs>().axis, x.rank(), node.op->name);
  const AxisSplit s = split_at_axis(x.shape, axis);
  Array out(node.type.shape, node.type.dtype);
  std::vector<double> row(s.n), res(s.n);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const int64_t base = o * s.n * s.inner + i;
      for (int64_t j = 0; j < s.n; ++j) row[j] = x.data[base + j * s.inner];
      f(row, res);
      for (int64_t j = 0; j < s.n; ++j) out.data[base + j * s.inner] = res[j];
    }
  }
  return out;
}

// max(row) and log(sum(exp(row - max))): the stable form both softmaxes share. An all -inf row
// keeps max = -inf, giving NaN like the textbook formula (and PyTorch).
std::pair<double, double> max_and_log_sum_exp(const std::vector<double>& row) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : row) m = std::max(m, v);
  double s = 0.0;
  for (double v : row) s += std::exp(v - m);
  return {m, std::log(s)};
}

std::vector<OpSample> softmax_samples() {
  auto s = [](std::string label, Shape shape, int64_t axis) {
    return OpSample{.label = std::move(label),
                    .inputs = {{std::move(shape), DType::f32}},
                    .attrs = SoftmaxAttrs{axis},
                    .ranges = {{-3.0, 3.0}},
                    .no_grad = {false}};
  };
  return {s("last_axis", {2, 3, 4}, -1), s("middle_axis", {2, 3, 4}, 1),
          s("first_axis", {3, 2, 2}, 0), s("vector", {5}, 0),
          s("size1_axis", {3, 1}, -1),   s("batch4d", {2, 1, 3, 4}, -2)};
}

void check_dropout_step(const TensorType& step) {
  if (!step.shape.empty() || (step.dtype != DType::i32 && step.dtype != DType::u32)) {
    throw ShapeError("dropout: the step must be an i32 or u32 scalar, got " + step.str());
  }
}

// Where step `step` draws its mask in the stream of the op's seed: the masks of successive
// steps are disjoint stretches of one stream. A negative i32 step counts as its u32 value.
uint64_t dropout_offset(const Node& n, std::span<const Array* const> in) {
  if (in.size() < 2) return 0;
  const auto step = static_cast<uint32_t>(static_cast<int64_t>(in[1]->data[0]));
  return static_cast<uint64_t>(step) * static_cast<uint64_t>(n.type.numel());
}

void check_dropout_p(std::string_view op, double p) {
  if (!(p >= 0.0 && p < 1.0)) {
    throw Error(std::string(op) + ": p must be in [0, 1), got " + std::to_string(p));
  }
}

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "softmax",
      .arity = 1,
      .archetype = Archetype::reduction,
      .infer = [](const Attrs& a,
                  std::span<const TensorType> in) { return infer_softmax("softmax", a, in); },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            return eval_rows(n, *in[0],
                             [](const std::vector<double>& row, std::vector<double>& out) {
                               auto [m, lse] = max_and_log_sum_exp(row);
                               for (size_t j = 0; j < row.size(); ++j)
                                 out[j] = std::exp(row[j] - m - lse);
                             });
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor y, Tensor g) {
            const int64_t axis = n.attrs.as<SoftmaxAttrs>().axis;
            return std::vector<Tensor>{y * (g - sum(g * y, {axis}, true))};
          },
      .decompose =
          [](const Node& n, std::span<const Tensor> in) {
            return softmax_primitive(in[0], n.attrs.as<SoftmaxAttrs>().axis);
          },
      .samples = softmax_samples,
      .summary = "exp(x - max) / sum(exp(x - max)) along one axis",
  });
  r.add(OpDef{
      .name = "log_softmax",
      .arity = 1,
      .archetype = Archetype::reduction,
      .infer = [](const Attrs& a,
                  std::span<const TensorType> in) { return infer_softmax("log_softmax", a, in); },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            return eval_rows(n, *in[0],
                             [](const std::vector<double>& row, std::vector<double>& out) {
                               auto [m, lse] = max_and_log_sum_exp(row);
                               for (size_t j = 0; j < row.size(); ++j) out[j] = row[j] - m - lse;
                             });
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor y, Tensor g) {
            const int64_t axis = n.attrs.as<SoftmaxAttrs>().axis;
            return std::vector<Tensor>{g - exp(y) * sum(g, {axis}, true)};
          },
      .decompose =
          [](const Node& n, std::span<const Tensor> in) {
            return log_softmax_primitive(in[0], n.attrs.as<SoftmaxAttrs>().axis);
          },
      .samples = softmax_samples,
      .summary = "x - max - log(sum(exp(x - max))) along one axis",
  });
  r.add(OpDef{
      .name = "dropout",
      .arity = -1,
      .archetype = Archetype::pointwise,
      .infer =
          [](const Attrs& a, std::span<const TensorType> in) {
            check_dropout_p("dropout", a.as<DropoutAttrs>().p);
            if (in.size() == 2) check_dropout_step(in[1]);
            if (in.size() > 2) throw ShapeError("dropout: expected x and an optional step");
            return infer_unary_float("dropout", in.first(1));
          },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const auto& a = n.attrs.as<DropoutAttrs>();
            const double scale = 1.0 / (1.0 - a.p);
            const uint64_t offset = dropout_offset(n, in);
            Array out(n.type.shape, n.type.dtype);
            for (size_t i = 0; i < out.data.size(); ++i) {
              const bool keep = random_uniform(a.seed, offset + i) >= a.p;
              out.data[i] = keep ? in[0]->data[i] * scale : 0.0;
            }
            return out;
          },
      // Linear in x with a mask fixed by (seed, step, index): the transpose is the op itself.
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor y, Tensor g) {
            if (in.size() == 1)
              return std::vector<Tensor>{g.graph().apply("dropout", n.attrs, {g})};
            return std::vector<Tensor>{g.graph().apply("dropout", n.attrs, {g, in[1]}), Tensor{}};
          },
      .samples =
          [] {
            auto s = [](std::string label, Shape shape, double p, uint64_t seed) {
              return OpSample{.label = std::move(label),
                              .inputs = {{std::move(shape), DType::f32}},
                              .attrs = DropoutAttrs{p, seed},
                              .ranges = {{-2.0, 2.0}},
                              .no_grad = {false}};
            };
            auto stepped = [](std::string label, Shape shape, double p, DType step) {
              return OpSample{.label = std::move(label),
                              .inputs = {{std::move(shape), DType::f32}, {{}, step}},
                              .attrs = DropoutAttrs{p, 5},
                              .ranges = {{-2.0, 2.0}, {0.0, 100000.0}},
                              .no_grad = {false, true}};
            };
            return std::vector<OpSample>{s("half", {4, 5}, 0.5, 1),
                                         s("light_3d", {2, 3, 5}, 0.1, 7),
                                         s("heavy", {16}, 0.9, 3),
                                         s("scalar", {}, 0.25, 11),
                                         stepped("step_i32", {3, 7}, 0.5, DType::i32),
                                         stepped("step_u32", {40}, 0.3, DType::u32)};
          },
      .summary = "inverted dropout: x / (1-p) where random_uniform(seed, step·numel + i) >= p, "
                 "else 0 (step: an optional i32/u32 scalar input, 0 without it)",
  });
}

}  // namespace ops

void register_nn_ops(OpRegistry& r) {
  ops::register_softmax_ops(r);
  ops::register_norm_ops(r);
  ops::register_batch_norm_ops(r);
}

Tensor softmax(Tensor x, int64_t axis) {
  ops::require_tensor(x, "softmax", "x");
  if (x.rank() > 0) axis = normalize_axis(axis, x.rank(), "softmax");
  return x.graph().apply("softmax", SoftmaxAttrs{axis}, {x});
}

Tensor log_softmax(Tensor x, int64_t axis) {
  ops::require_tensor(x, "log_softmax", "x");
  if (x.rank() > 0) axis = normalize_axis(axis, x.rank(), "log_softmax");
  return x.graph().apply("log_softmax", SoftmaxAttrs{axis}, {x});
}

Tensor dropout(Tensor x, double p, uint64_t seed, bool training) {
  ops::require_tensor(x, "dropout", "x");
  ops::check_dropout_p("dropout", p);
  if (!training || p == 0.0) return x;
  return x.graph().apply("dropout", DropoutAttrs{p, seed}, {x});
}

}  // namespace mn
