// cross_entropy and nll_loss: losses over a class axis (1, or 0 for a single sample [C]) with
// class-index or probability targets, ignore_index and label smoothing, as PyTorch defines them;
// plus their fused backward ops (one pass over each row of scores, evaluated in double).
#include <cmath>
#include <limits>
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/loss.h"
#include "ir/ops/loss_common.h"

namespace mn {
namespace {

using CrossEntropyBackwardAttrs = LossBackwardAttrs<CrossEntropyAttrs>;

int class_axis(const Shape& scores) { return scores.size() == 1 ? 0 : 1; }

// The scores' shape without the class axis: the shape of index targets and of unreduced losses.
Shape batch_shape(const Shape& scores) {
  Shape b = scores;
  b.erase(b.begin() + class_axis(scores));
  return b;
}

// Scores [N, C, d...] seen as [outer, C, inner]; a batch element b = o * inner + s runs over the
// batch shape in row-major order, and its class c sits at (o * C + c) * inner + s.
struct ClassLayout {
  int64_t outer = 1;
  int64_t classes = 1;
  int64_t inner = 1;

  explicit ClassLayout(const Shape& scores) {
    classes = scores[class_axis(scores)];
    if (scores.size() > 1) outer = scores[0];
    for (size_t i = 2; i < scores.size(); ++i) inner *= scores[i];
  }
  int64_t batch() const { return outer * inner; }
  size_t at(int64_t b, int64_t c) const {
    return static_cast<size_t>(((b / inner) * classes + c) * inner + b % inner);
  }
};

std::string index_str(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(idx);
}

// The class of batch element b, or -1 when its target is ignore_index. Any other target outside
// [0, C) is an error, as in PyTorch.
int64_t target_class(std::string_view op, const Array& target, int64_t b, int64_t classes,
                     int64_t ignore_index) {
  const double v = target.data[static_cast<size_t>(b)];
  const auto t = static_cast<int64_t>(v);
  if (t == ignore_index) return -1;
  if (t < 0 || t >= classes) {
    throw IndexError(std::string(op) + ": target value " + std::to_string(t) + " at target index " +
                     index_str(b, target.shape) + " is out of range [0, " +
                     std::to_string(classes) + ") and is not ignore_index (" +
                     std::to_string(ignore_index) + ")");
  }
  return t;
}

// Classes of every batch element (-1: ignored) and how many are not ignored.
std::vector<int64_t> target_classes(std::string_view op, const Array& target, const ClassLayout& l,
                                    int64_t ignore_index, double& counted) {
  std::vector<int64_t> cls(static_cast<size_t>(l.batch()));
  counted = 0;
  for (int64_t b = 0; b < l.batch(); ++b) {
    cls[b] = target_class(op, target, b, l.classes, ignore_index);
    if (cls[b] >= 0) counted += 1;
  }
  return cls;
}

// log_softmax of batch element b's scores, as PyTorch computes it: (z - max) - log(sum exp).
void log_softmax_row(const Array& z, const ClassLayout& l, int64_t b, std::vector<double>& out) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < l.classes; ++c) m = std::max(m, z.data[l.at(b, c)]);
  double s = 0;
  for (int64_t c = 0; c < l.classes; ++c) s += std::exp(z.data[l.at(b, c)] - m);
  const double log_s = std::log(s);
  for (int64_t c = 0; c < l.classes; ++c) out[c] = (z.data[l.at(b, c)] - m) - log_s;
}

// ---- shape inference ----

void check_scores(std::string_view op, std::span<const TensorType> in) {
  if (!is_float(in[0].dtype) || in[0].rank() < 1) {
    shape_fail(op, in, "scores must be float with shape [C] or [N, C, ...]");
  }
}

void check_index_target(std::string_view op, std::span<const TensorType> in, bool allow_probs) {
  const TensorType& s = in[0];
  const TensorType& t = in[1];
  if (t.dtype == DType::i32) {
    if (t.shape != batch_shape(s.shape)) {
      shape_fail(op, in,
                 "an index target must have the scores' shape without the class axis, " +
                     shape_str(batch_shape(s.shape)));
    }
  } else if (allow_probs && is_float(t.dtype)) {
    if (t != s) shape_fail(op, in, "a probability target must have the scores' shape and dtype");
  } else {
    shape_fail(op, in,
               allow_probs ? "target must be i32 class indices or float probabilities"
                           : "target must be i32 class indices");
  }
}

TensorType infer_cross_entropy_as(std::string_view op, const CrossEntropyAttrs& a,
                                  std::span<const TensorType> in) {
  ops::check_reduction(op, in, a.reduction);
  check_scores(op, in);
  check_index_target(op, in, true);
  if (!(a.label_smoothing >= 0.0 && a.label_smoothing <= 1.0)) {
    shape_fail(op, in,
               "label_smoothing must be in [0, 1], got " + std::to_string(a.label_smoothing));
  }
  return ops::loss_output_type(batch_shape(in[0].shape), in[0].dtype, a.reduction);
}

TensorType infer_nll_loss_as(std::string_view op, const NllLossAttrs& a,
                             std::span<const TensorType> in) {
  ops::check_reduction(op, in, a.reduction);
  check_scores(op, in);
  check_index_target(op, in, false);
  return ops::loss_output_type(batch_shape(in[0].shape), in[0].dtype, a.reduction);
}

void check_cotangent(std::string_view op, std::span<const TensorType> in, const TensorType& ct,
                     const TensorType& expected) {
  if (ct != expected) shape_fail(op, in, "the cotangent must be " + expected.str());
}

// ---- cross_entropy ----

Array eval_cross_entropy(const Node& n, std::span<const Array* const> in) {
  const auto& a = n.attrs.as<CrossEntropyAttrs>();
  const Array& z = *in[0];
  const Array& t = *in[1];
  const ClassLayout l(z.shape);
  const bool probs = is_float(t.dtype);
  const double eps = a.label_smoothing;
  const double c_count = static_cast<double>(l.classes);
  double counted = static_cast<double>(l.batch());
  std::vector<int64_t> cls;
  if (!probs) cls = target_classes("cross_entropy", t, l, a.ignore_index, counted);
  std::vector<double> per(static_cast<size_t>(l.batch()), 0.0);
  std::vector<double> lsm(static_cast<size_t>(l.classes));
  for (int64_t b = 0; b < l.batch(); ++b) {
    if (!probs && cls[b] < 0) continue;
    log_softmax_row(z, l, b, lsm);
    double acc = 0;
    if (probs) {
      for (int64_t c = 0; c < l.classes; ++c) {
        acc -= (t.data[l.at(b, c)] * (1.0 - eps) + eps / c_count) * lsm[c];
      }
    } else {
      acc = -(1.0 - eps) * lsm[cls[b]];
      if (eps != 0.0) {
        double smooth = 0;
        for (int64_t c = 0; c < l.classes; ++c) smooth -= lsm[c];
        acc += eps / c_count * smooth;
      }
    }
    per[b] = acc;
  }
  return ops::reduce_losses(std::move(per), batch_shape(z.shape), n.type.dtype, a.reduction,
                            counted);
}

// d/dlogits = w (sum(t') softmax - t') and d/dtarget = -w (1 - e) log_softmax, where t' is the
// smoothed target ((1 - e) onehot + e / C for indices) and w the element's scaled cotangent.
Array eval_cross_entropy_backward(const Node& n, std::span<const Array* const> in) {
  const auto& ba = n.attrs.as<CrossEntropyBackwardAttrs>();
  const CrossEntropyAttrs& a = ba.forward;
  const Array& z = *in[0];
  const Array& t = *in[1];
  const Array& ct = *in[2];
  const ClassLayout l(z.shape);
  const bool probs = is_float(t.dtype);
  const double eps = a.label_smoothing;
  const double c_count = static_cast<double>(l.classes);
  double counted = static_cast<double>(l.batch());
  std::vector<int64_t> cls;
  if (!probs) cls = target_classes("cross_entropy_backward", t, l, a.ignore_index, counted);
  Array out(n.type.shape, n.type.dtype);
  std::vector<double> lsm(static_cast<size_t>(l.classes));
  std::vector<double> smoothed(static_cast<size_t>(l.classes));
  for (int64_t b = 0; b < l.batch(); ++b) {
    if (!probs && cls[b] < 0)
      continue;  // ignored: no gradient (also when all are, and mean is NaN)
    double w = ops::cotangent_at(ct, b);
    if (a.reduction == Reduction::mean) w /= counted;
    log_softmax_row(z, l, b, lsm);
    if (ba.wrt == 1) {
      for (int64_t c = 0; c < l.classes; ++c) out.data[l.at(b, c)] = -w * (1.0 - eps) * lsm[c];
      continue;
    }
    double total = 0;
    for (int64_t c = 0; c < l.classes; ++c) {
      smoothed[c] = probs ? t.data[l.at(b, c)] * (1.0 - eps) + eps / c_count
                          : (c == cls[b] ? 1.0 - eps : 0.0) + eps / c_count;
      total += smoothed[c];
    }
    if (!probs) total = 1.0;  // exactly, whatever the rounding of the sum above
    for (int64_t c = 0; c < l.classes; ++c) {
      out.data[l.at(b, c)] = w * (total * std::exp(lsm[c]) - smoothed[c]);
    }
  }
  return out;
}

// Per batch element, the factor w that scales its row of the gradient (0 where ignored), shaped
// to broadcast over the class axis: graph-op form for second-order gradients.
Tensor row_weight(const CrossEntropyAttrs& a, Tensor z, Tensor t, Tensor ct) {
  const int axis = class_axis(z.shape());
  const ClassLayout l(z.shape());
  Graph& g = z.graph();
  if (t.dtype() == DType::i32) {
    // nll_loss_backward puts -w at each element's target class: summing the classes gives -w.
    Tensor scatter =
        g.apply("nll_loss_backward", NllLossBackwardAttrs{{a.reduction, a.ignore_index}, l.classes},
                {t, ct});
    return neg(sum(scatter, {axis}, true));
  }
  if (a.reduction == Reduction::none) return unsqueeze(ct, axis);
  if (a.reduction == Reduction::sum) return ct;
  return ct / static_cast<double>(l.batch());
}

std::vector<Tensor> vjp_cross_entropy_backward(const Node& n, std::span<const Tensor> in, Tensor,
                                               Tensor w_out) {
  const auto& ba = n.attrs.as<CrossEntropyBackwardAttrs>();
  const CrossEntropyAttrs& a = ba.forward;
  Tensor z = in[0], t = in[1], ct = in[2];
  const int axis = class_axis(z.shape());
  const bool probs = is_float(t.dtype());
  const double eps = a.label_smoothing;
  Graph& g = z.graph();
  // The op is linear in the cotangent: its adjoint contracts w_out with the op at unit cotangent.
  Tensor unit = g.apply(n.op->name, n.attrs, {z, t, ops::ones_like(ct)});
  Tensor contracted = mul(w_out, unit);
  Tensor d_ct = a.reduction == Reduction::none ? sum(contracted, {axis}) : sum(contracted);

  Tensor w = row_weight(a, z, t, ct);
  Tensor sm = softmax(z, axis);
  if (ba.wrt == 1) {
    // out = -w (1 - e) log_softmax(z)
    Tensor jt = sub(w_out, mul(sm, sum(w_out, {axis}, true)));
    return {mul(w * -(1.0 - eps), jt), Tensor{}, d_ct};
  }
  // out = w (T softmax(z) - t'), T = sum(t') = (1 - e) sum(t) + e
  Tensor sm_w = sum(mul(sm, w_out), {axis}, true);
  Tensor wt = probs ? mul(w, sum(t, {axis}, true) * (1.0 - eps) + eps) : w;
  Tensor d_z = mul(mul(wt, sm), sub(w_out, sm_w));
  Tensor d_t = probs ? mul(w * (1.0 - eps), sub(sm_w, w_out)) : Tensor{};
  return {d_z, d_t, d_ct};
}

// log_softmax + nll_loss, with the smoothing term as a masked sum; probability targets as
// -sum(t' * log_softmax). Constants are built from the attributes so that dyadic ones are exact.
Tensor decompose_cross_entropy(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<CrossEntropyAttrs>();
  Tensor z = in[0], t = in[1];
  const int axis = class_axis(z.shape());
  const ClassLayout l(z.shape());
  const double eps = a.label_smoothing;
  const double c_count = static_cast<double>(l.classes);
  Tensor lsm = log_softmax(z, axis);
  if (is_float(t.dtype())) {
    Tensor target = eps == 0.0 ? t : t * (1.0 - eps) + ops::scalar_like(z, eps) / c_count;
    return ops::reduce_tensor(neg(sum(mul(lsm, target), {axis})), a.reduction);
  }
  Tensor nll = z.graph().apply("nll_loss", NllLossAttrs{a.reduction, a.ignore_index}, {lsm, t});
  if (eps == 0.0) return nll;
  Tensor keep = ne(cast(t, z.dtype()), ops::scalar_like(z, static_cast<double>(a.ignore_index)));
  Tensor smooth = where(keep, neg(sum(lsm, {axis})), ops::scalar_like(z, 0.0));
  Tensor reduced = a.reduction == Reduction::none  ? smooth
                   : a.reduction == Reduction::sum ? sum(smooth)
                                                   : sum(smooth) / sum(keep);
  return nll * (1.0 - eps) + reduced * eps / c_count;
}

// ---- nll_loss ----

Array eval_nll_loss(const Node& n, std::span<const Array* const> in) {
  const auto& a = n.attrs.as<NllLossAttrs>();
  const Array& x = *in[0];
  const ClassLayout l(x.shape);
  double counted = 0;
  auto cls = target_classes("nll_loss", *in[1], l, a.ignore_index, counted);
  std::vector<double> per(static_cast<size_t>(l.batch()), 0.0);
  for (int64_t b = 0; b < l.batch(); ++b) {
    if (cls[b] >= 0) per[b] = -x.data[l.at(b, cls[b])];
  }
  return ops::reduce_losses(std::move(per), batch_shape(x.shape), n.type.dtype, a.reduction,
                            counted);
}

Shape scores_shape(const Shape& target, int64_t classes) {
  Shape s = target;
  s.insert(s.begin() + (target.empty() ? 0 : 1), classes);
  return s;
}

Array eval_nll_loss_backward(const Node& n, std::span<const Array* const> in) {
  const auto& ba = n.attrs.as<NllLossBackwardAttrs>();
  const Array& ct = *in[1];
  const ClassLayout l(n.type.shape);
  double counted = 0;
  auto cls = target_classes("nll_loss_backward", *in[0], l, ba.forward.ignore_index, counted);
  Array out(n.type.shape, n.type.dtype);
  for (int64_t b = 0; b < l.batch(); ++b) {
    if (cls[b] < 0) continue;
    double w = ops::cotangent_at(ct, b);
    if (ba.forward.reduction == Reduction::mean) w /= counted;
    out.data[l.at(b, cls[b])] = -w;
  }
  return out;
}

// ---- samples ----

TensorType f32(Shape s) { return {std::move(s), DType::f32}; }
TensorType i32(Shape s) { return {std::move(s), DType::i32}; }

CrossEntropyAttrs ce(Reduction r, int64_t ignore_index = -100, double smoothing = 0.0) {
  return {r, ignore_index, smoothing};
}

// Smoothing values are dyadic so the decomposition's f32 constants hold them exactly; the
// PyTorch comparison (tests/ir/loss_torch_test.cpp) covers values such as 0.1.
std::vector<OpSample> cross_entropy_samples() {
  using R = Reduction;
  const std::pair<double, double> logits{-2.0, 2.0}, probs{0.0, 1.0};
  auto index = [&](std::string label, Shape s, CrossEntropyAttrs a, int64_t classes) {
    Shape ts = batch_shape(s);
    return ops::loss_sample(std::move(label), {f32(s), i32(ts)}, a,
                            {logits, {0.0, static_cast<double>(classes)}}, {false, true});
  };
  auto soft = [&](std::string label, Shape s, CrossEntropyAttrs a) {
    return ops::loss_sample(std::move(label), {f32(s), f32(s)}, a, {logits, probs});
  };
  return {
      index("index_mean", {4, 5}, ce(R::mean), 5),
      index("index_none", {4, 5}, ce(R::none), 5),
      index("index_sum", {4, 5}, ce(R::sum), 5),
      index("index_ignore_mean", {6, 3}, ce(R::mean, 2), 3),
      index("index_ignore_none", {6, 3}, ce(R::none, 2), 3),
      index("index_smoothing_ignore_mean", {5, 4}, ce(R::mean, 1, 0.25), 4),
      index("index_smoothing_sum_3d", {2, 4, 3}, ce(R::sum, -100, 0.125), 4),
      index("index_smoothing_4d_mean", {2, 3, 2, 2}, ce(R::mean, 0, 0.25), 3),
      index("index_4d_none", {2, 3, 2, 2}, ce(R::none), 3),
      index("index_1d_none", {5}, ce(R::none), 5),
      index("index_1d_smoothing_mean", {5}, ce(R::mean, -100, 0.5), 5),
      index("one_class", {3, 1}, ce(R::mean), 1),
      soft("probs_mean", {3, 4}, ce(R::mean)),
      soft("probs_none", {3, 4}, ce(R::none)),
      soft("probs_sum", {3, 4}, ce(R::sum)),
      soft("probs_smoothing_4d_mean", {2, 3, 2, 2}, ce(R::mean, -100, 0.25)),
      soft("probs_1d_smoothing_none", {4}, ce(R::none, -100, 0.125)),
  };
}

std::vector<OpSample> cross_entropy_backward_samples() {
  using R = Reduction;
  using BA = CrossEntropyBackwardAttrs;
  const std::pair<double, double> logits{-2.0, 2.0}, probs{0.0, 1.0}, cot{-1.0, 1.0};
  auto index = [&](std::string label, Shape s, BA a, int64_t classes) {
    Shape ts = batch_shape(s);
    TensorType ct = ops::loss_output_type(ts, DType::f32, a.forward.reduction);
    return ops::loss_sample(std::move(label), {f32(s), i32(ts), ct}, a,
                            {logits, {0.0, static_cast<double>(classes)}, cot},
                            {false, true, false});
  };
  auto soft = [&](std::string label, Shape s, BA a) {
    TensorType ct = ops::loss_output_type(batch_shape(s), DType::f32, a.forward.reduction);
    return ops::loss_sample(std::move(label), {f32(s), f32(s), ct}, a, {logits, probs, cot});
  };
  return {
      index("index_mean", {4, 5}, BA{ce(R::mean), 0}, 5),
      index("index_smoothing_ignore_none", {5, 3}, BA{ce(R::none, 1, 0.25), 0}, 3),
      index("index_4d_sum", {2, 3, 2, 2}, BA{ce(R::sum, -100, 0.125), 0}, 3),
      index("index_1d_mean", {4}, BA{ce(R::mean), 0}, 4),
      soft("probs_mean_logits", {3, 4}, BA{ce(R::mean, -100, 0.25), 0}),
      soft("probs_none_logits_3d", {2, 3, 2}, BA{ce(R::none), 0}),
      soft("probs_none_target", {3, 4}, BA{ce(R::none, -100, 0.25), 1}),
      soft("probs_sum_target_1d", {4}, BA{ce(R::sum), 1}),
      soft("probs_mean_target_4d", {2, 3, 2, 2}, BA{ce(R::mean, -100, 0.125), 1}),
  };
}

std::vector<OpSample> nll_loss_samples() {
  using R = Reduction;
  auto s = [](std::string label, Shape shape, NllLossAttrs a, int64_t classes) {
    Shape ts = batch_shape(shape);
    return ops::loss_sample(std::move(label), {f32(shape), i32(ts)}, a,
                            {{-3.0, 0.0}, {0.0, static_cast<double>(classes)}}, {false, true});
  };
  return {
      s("mean", {4, 5}, {R::mean}, 5),
      s("none", {4, 5}, {R::none}, 5),
      s("sum", {4, 5}, {R::sum}, 5),
      s("ignore_mean", {6, 3}, {R::mean, 2}, 3),
      s("ignore_none_3d", {2, 4, 3}, {R::none, 1}, 4),
      s("ignore_sum_4d", {2, 3, 2, 2}, {R::sum, 0}, 3),
      s("mean_4d", {2, 3, 2, 2}, {R::mean}, 3),
      s("single_1d", {5}, {R::mean}, 5),
      s("one_class", {3, 1}, {R::sum}, 1),
  };
}

std::vector<OpSample> nll_loss_backward_samples() {
  using R = Reduction;
  auto s = [](std::string label, Shape target, NllLossAttrs a, int64_t classes) {
    TensorType ct = ops::loss_output_type(target, DType::f32, a.reduction);
    return ops::loss_sample(std::move(label), {i32(target), ct}, NllLossBackwardAttrs{a, classes},
                            {{0.0, static_cast<double>(classes)}, {-1.0, 1.0}}, {true, false});
  };
  return {
      s("mean", {4}, {R::mean}, 5),
      s("ignore_none_3d", {2, 3}, {R::none, 1}, 4),
      s("ignore_mean_4d", {2, 2, 2}, {R::mean, 0}, 3),
      s("sum_1d", {}, {R::sum}, 5),
  };
}

}  // namespace

namespace ops {

void register_class_loss_ops(OpRegistry& r) {
  r.add({.name = "cross_entropy",
         .arity = 2,
         .archetype = Archetype::reduction,
         .infer =
             [](const Attrs& at, std::span<const TensorType> in) {
               return infer_cross_entropy_as("cross_entropy", at.as<CrossEntropyAttrs>(), in);
             },
         .eval = eval_cross_entropy,
         .vjp =
             [](const Node& n, std::span<const Tensor> in, Tensor, Tensor ct) {
               const auto& a = n.attrs.as<CrossEntropyAttrs>();
               Graph& g = ct.graph();
               Tensor d_logits = g.apply("cross_entropy_backward", CrossEntropyBackwardAttrs{a, 0},
                                         {in[0], in[1], ct});
               Tensor d_target = is_float(in[1].dtype())
                                     ? g.apply("cross_entropy_backward",
                                               CrossEntropyBackwardAttrs{a, 1}, {in[0], in[1], ct})
                                     : Tensor{};
               return std::vector<Tensor>{d_logits, d_target};
             },
         .decompose = decompose_cross_entropy,
         .samples = cross_entropy_samples,
         .summary = "softmax cross-entropy of logits [N, C, ...] against class indices or "
                    "probabilities, with ignore_index and label smoothing"});
  r.add({.name = "cross_entropy_backward",
         .arity = 3,
         .archetype = Archetype::reduction,
         .infer =
             [](const Attrs& at, std::span<const TensorType> in) {
               const auto& ba = at.as<CrossEntropyBackwardAttrs>();
               const char* op = "cross_entropy_backward";
               TensorType out = infer_cross_entropy_as(op, ba.forward, in.first(2));
               check_cotangent(op, in, in[2], out);
               if (ba.wrt != 0 && ba.wrt != 1)
                 shape_fail(op, in, "wrt must be 0 (logits) or 1 (target)");
               if (ba.wrt == 1 && !is_float(in[1].dtype)) {
                 shape_fail(op, in, "index targets take no gradient (wrt = 1 needs probabilities)");
               }
               return in[ba.wrt];
             },
         .eval = eval_cross_entropy_backward,
         .vjp = vjp_cross_entropy_backward,
         .samples = cross_entropy_backward_samples,
         .summary = "gradient of cross_entropy w.r.t. logits (w (softmax sum(t') - t')) or "
                    "probability target",
         .internal = true});
  r.add({.name = "nll_loss",
         .arity = 2,
         .archetype = Archetype::reduction,
         .infer =
             [](const Attrs& at, std::span<const TensorType> in) {
               return infer_nll_loss_as("nll_loss", at.as<NllLossAttrs>(), in);
             },
         .eval = eval_nll_loss,
         .vjp =
             [](const Node& n, std::span<const Tensor> in, Tensor, Tensor ct) {
               const auto& a = n.attrs.as<NllLossAttrs>();
               const int64_t classes = in[0].shape()[class_axis(in[0].shape())];
               Tensor d = ct.graph().apply("nll_loss_backward", NllLossBackwardAttrs{a, classes},
                                           {in[1], ct});
               return std::vector<Tensor>{d, Tensor{}};
             },
         .samples = nll_loss_samples,
         .summary = "negative log-likelihood of log-probabilities [N, C, ...] at class indices, "
                    "with ignore_index"});
  r.add({.name = "nll_loss_backward",
         .arity = 2,
         .archetype = Archetype::gather_scatter,
         .infer =
             [](const Attrs& at, std::span<const TensorType> in) {
               const auto& ba = at.as<NllLossBackwardAttrs>();
               const char* op = "nll_loss_backward";
               if (in[0].dtype != DType::i32)
                 shape_fail(op, in, "target must be i32 class indices");
               if (!is_float(in[1].dtype)) shape_fail(op, in, "the cotangent must be float");
               if (ba.classes < 1) shape_fail(op, in, "classes must be at least 1");
               ops::check_reduction(op, in, ba.forward.reduction);
               check_cotangent(
                   op, in, in[1],
                   ops::loss_output_type(in[0].shape, in[1].dtype, ba.forward.reduction));
               return TensorType{scores_shape(in[0].shape, ba.classes), in[1].dtype};
             },
         .eval = eval_nll_loss_backward,
         .vjp =
             [](const Node& n, std::span<const Tensor> in, Tensor, Tensor w_out) {
               // Linear in the cotangent: the adjoint gathers w_out at the targets like nll_loss.
               const auto& ba = n.attrs.as<NllLossBackwardAttrs>();
               Tensor d_ct = w_out.graph().apply("nll_loss", ba.forward, {w_out, in[0]});
               return std::vector<Tensor>{Tensor{}, d_ct};
             },
         .samples = nll_loss_backward_samples,
         .summary = "gradient of nll_loss: -scaled cotangent at each target class, 0 elsewhere",
         .internal = true});
}

}  // namespace ops
}  // namespace mn
