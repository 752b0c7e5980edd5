// Reductions over any set of axes (sum, mean, max, min, argmax, variance) and sum_to, the adjoint
// of broadcasting. The reference walks the input once in row-major order, accumulating in double
// into the output seen with keepdims (reduced axes have stride 0), so it is O(n) for any axes.
#include "ir/ops/reduce.h"

#include <cmath>
#include <limits>
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"

namespace mn {

namespace {

std::string axes_str(std::span<const int64_t> axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "]";
}

// Normalized axes; an out-of-range axis is reported with the op's inputs.
std::vector<int64_t> reduce_axes(std::string_view op, std::span<const TensorType> in,
                                 std::span<const int64_t> axes) {
  try {
    return ops::normalize_axes(axes, in[0].rank(), op);
  } catch (const ShapeError&) {
    shape_fail(op, in, "axes " + axes_str(axes) + " within rank " + std::to_string(in[0].rank()));
  }
}

// The input shape with reduced axes set to 1 (the keepdims output shape).
Shape kept_shape(const Shape& s, const std::vector<int64_t>& axes) {
  Shape k = s;
  for (int64_t a : axes) k[a] = 1;
  return k;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keepdims) {
  if (keepdims) return kept_shape(s, axes);
  Shape out;
  size_t j = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (j < axes.size() && axes[j] == i) {
      ++j;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

int64_t reduced_count(const Shape& s, const std::vector<int64_t>& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= s[a];
  return n;
}

// f(input_index, output_offset) for every input element, in row-major order.
template <class F>
void for_each_reduced(const Shape& in_shape, const Shape& kept, F&& f) {
  std::array<std::vector<int64_t>, 1> s{ops::broadcast_strides(kept, in_shape)};
  ops::for_each_broadcast<1>(in_shape, s,
                             [&](int64_t i, const std::array<int64_t, 1>& o) { f(i, o[0]); });
}

// Reshapes a reduced tensor to the keepdims shape so that it broadcasts against the input.
Tensor to_kept(Tensor t, const Shape& kept) { return t.shape() == kept ? t : reshape(t, kept); }

std::vector<int64_t> node_axes(const Node& n, std::span<const Array* const> in,
                               const std::vector<int64_t>& axes) {
  return ops::normalize_axes(axes, in[0]->rank(), n.op_name());
}

enum class Kind { sum, mean, max, min };

Array eval_reduce(Kind kind, const Node& n, const Array& x, const std::vector<int64_t>& axes) {
  const Shape kept = kept_shape(x.shape, axes);
  double init = 0.0;
  if (kind == Kind::max) init = -std::numeric_limits<double>::infinity();
  if (kind == Kind::min) init = std::numeric_limits<double>::infinity();
  Array out(kept, n.type.dtype);
  std::fill(out.data.begin(), out.data.end(), init);
  switch (kind) {
    case Kind::sum:
    case Kind::mean:
      for_each_reduced(x.shape, kept, [&](int64_t i, int64_t o) { out.data[o] += x.data[i]; });
      break;
    case Kind::max:  // NaN propagates, as in PyTorch
      for_each_reduced(x.shape, kept, [&](int64_t i, int64_t o) {
        double v = x.data[i];
        if (std::isnan(v) || v > out.data[o]) out.data[o] = v;
      });
      break;
    case Kind::min:
      for_each_reduced(x.shape, kept, [&](int64_t i, int64_t o) {
        double v = x.data[i];
        if (std::isnan(v) || v < out.data[o]) out.data[o] = v;
      });
      break;
  }
  if (kind == Kind::mean) {
    const double count = static_cast<double>(reduced_count(x.shape, axes));
    for (double& v : out.data) v /= count;
  }
  out.shape = n.type.shape;
  return out;
}

// Shapes and axes in f32; rows and columns long enough for the GPU's workgroup trees (> 64 and
// > 256 elements); f16/bf16 storage; i32 past 2^24 where the op accepts integers.
std::vector<OpSample> reduce_samples(bool with_int) {
  std::vector<OpSample> s;
  auto add = [&](const char* label, Shape shape, std::vector<int64_t> axes, bool keepdims,
                 DType t = DType::f32, std::pair<double, double> range = {-2, 2}) {
    s.push_back({.label = label,
                 .inputs = {{std::move(shape), t}},
                 .attrs = ReduceAttrs{std::move(axes), keepdims},
                 .ranges = {range}});
  };
  add("all", {3, 4, 5}, {}, false);
  add("all_keepdims", {3, 4, 5}, {}, true);
  add("axis0", {3, 4, 5}, {0}, false);
  add("last_negative_keepdims", {3, 4, 5}, {-1}, true);
  add("outer_two", {3, 4, 5}, {0, 2}, false);
  add("middle_size_one", {3, 1, 4}, {1}, false);
  add("vector", {7}, {0}, false);
  add("batch_rows", {2, 3, 2, 4}, {-1, 1}, true);
  add("scalar", {}, {}, false);
  add("long_rows", {2, 300}, {1}, false);
  add("long_columns", {300, 3}, {0}, true);
  add("middle_long", {2, 70, 3}, {1}, false);
  add("f16_rows", {3, 70}, {-1}, false, DType::f16);
  add("bf16_columns", {70, 3}, {0}, false, DType::bf16);
  if (with_int) add("i32_all", {3, 4, 5}, {}, false, DType::i32, {-3e7, 3e7});
  return s;
}

OpDef reduce_op(const char* name, Kind kind, std::string summary) {
  OpDef d;
  d.name = name;
  d.arity = 1;
  d.archetype = Archetype::reduction;
  d.differentiable = true;
  d.infer = [name, kind](const Attrs& attrs, std::span<const TensorType> in) {
    const auto& a = attrs.as<ReduceAttrs>();
    if (kind == Kind::mean && !is_float(in[0].dtype)) shape_fail(name, in, "a float operand");
    auto axes = reduce_axes(name, in, a.axes);
    return TensorType{reduced_shape(in[0].shape, axes, a.keepdims), in[0].dtype};
  };
  d.eval = [kind](const Node& n, std::span<const Array* const> in) {
    return eval_reduce(kind, n, *in[0], node_axes(n, in, n.attrs.as<ReduceAttrs>().axes));
  };
  d.vjp = [kind](const Node& n, std::span<const Tensor> in, Tensor y, Tensor g) {
    Tensor x = in[0];
    auto axes = ops::normalize_axes(n.attrs.as<ReduceAttrs>().axes, x.rank(), n.op_name());
    const Shape kept = kept_shape(x.shape(), axes);
    Tensor gk = to_kept(g, kept);
    switch (kind) {
      case Kind::sum:
        return std::vector<Tensor>{broadcast_to(gk, x.shape())};
      case Kind::mean: {
        double count = static_cast<double>(reduced_count(x.shape(), axes));
        return std::vector<Tensor>{broadcast_to(gk / count, x.shape())};
      }
      case Kind::max:
      case Kind::min: {
        // The gradient is shared evenly among the elements equal to the extremum (PyTorch amax).
        Tensor mask = eq(x, to_kept(y, kept));
        Tensor ties = sum(mask, axes, /*keepdims=*/true);
        return std::vector<Tensor>{mask * (gk / ties)};
      }
    }
    return std::vector<Tensor>{Tensor{}};
  };
  if (kind == Kind::mean) {
    d.decompose = [](const Node& n, std::span<const Tensor> in) {
      const auto& a = n.attrs.as<ReduceAttrs>();
      auto axes = ops::normalize_axes(a.axes, in[0].rank(), "mean");
      return sum(in[0], axes, a.keepdims) / static_cast<double>(reduced_count(in[0].shape(), axes));
    };
  }
  d.samples = [kind] { return reduce_samples(kind != Kind::mean); };
  d.summary = std::move(summary);
  return d;
}

void register_argmax(OpRegistry& r) {
  r.add({.name = "argmax",
         .arity = 1,
         .archetype = Archetype::reduction,
         .differentiable = false,
         .infer =
             [](const Attrs& attrs, std::span<const TensorType> in) {
               const auto& a = attrs.as<ArgmaxAttrs>();
               if (in[0].rank() == 0) shape_fail("argmax", in, "an operand of rank >= 1");
               auto axes = reduce_axes("argmax", in, std::vector<int64_t>{a.axis});
               return TensorType{reduced_shape(in[0].shape, axes, a.keepdims), DType::i32};
             },
         .eval =
             [](const Node& n, std::span<const Array* const> in) {
               const Array& x = *in[0];
               auto axes = node_axes(n, in, {n.attrs.as<ArgmaxAttrs>().axis});
               const int64_t axis = axes[0];
               const Shape kept = kept_shape(x.shape, axes);
               const int64_t dim = x.shape[axis];
               const int64_t inner = contiguous_strides(x.shape)[axis];
               Array best(kept, DType::f32);
               std::fill(best.data.begin(), best.data.end(),
                         -std::numeric_limits<double>::infinity());
               Array out(n.type.shape, DType::i32);
               std::vector<char> seen(out.data.size(), 0);
               // Row-major order visits each row in increasing index, so a strict comparison keeps
               // the first maximum; NaN counts as the maximum (as PyTorch).
               for_each_reduced(x.shape, kept, [&](int64_t i, int64_t o) {
                 double v = x.data[i];
                 double& b = best.data[o];
                 if (!seen[o] || (!std::isnan(b) && (std::isnan(v) || v > b))) {
                   b = v;
                   seen[o] = 1;
                   out.data[o] = static_cast<double>((i / inner) % dim);
                 }
               });
               return out;
             },
         .samples =
             [] {
               std::vector<OpSample> s;
               auto add = [&](const char* label, Shape shape, int64_t axis, bool keepdims,
                              DType t = DType::f32, std::pair<double, double> range = {-2, 2}) {
                 s.push_back({.label = label,
                              .inputs = {{std::move(shape), t}},
                              .attrs = ArgmaxAttrs{axis, keepdims},
                              .ranges = {range}});
               };
               add("rows", {4, 10}, 1, false);
               add("axis0", {3, 4, 5}, 0, false);
               add("last_negative_keepdims", {3, 4, 5}, -1, true);
               add("vector", {6}, 0, false);
               add("long_rows", {3, 300}, 1, false);
               add("f16_columns", {70, 3}, 0, false, DType::f16);
               add("bf16_rows", {2, 40}, -1, true, DType::bf16);
               // Few distinct values: ties everywhere, the first index must win.
               add("i32_ties", {4, 300}, 1, false, DType::i32, {0, 4});
               add("i32_ties_columns", {100, 5}, 0, false, DType::i32, {0, 3});
               return s;
             },
         .summary = "index (i32) of the first maximum along an axis"});
}

void register_variance(OpRegistry& r) {
  r.add({.name = "variance",
         .arity = 1,
         .archetype = Archetype::reduction,
         .differentiable = true,
         .infer =
             [](const Attrs& attrs, std::span<const TensorType> in) {
               const auto& a = attrs.as<VarianceAttrs>();
               if (!is_float(in[0].dtype)) shape_fail("variance", in, "a float operand");
               auto axes = reduce_axes("variance", in, a.axes);
               int64_t n = reduced_count(in[0].shape, axes);
               if (n - a.correction <= 0) {
                 shape_fail("variance", in,
                            "more reduced elements (" + std::to_string(n) + ") than correction " +
                                std::to_string(a.correction));
               }
               return TensorType{reduced_shape(in[0].shape, axes, a.keepdims), in[0].dtype};
             },
         .eval =
             [](const Node& n, std::span<const Array* const> in) {
               const Array& x = *in[0];
               const auto& a = n.attrs.as<VarianceAttrs>();
               auto axes = node_axes(n, in, a.axes);
               const Shape kept = kept_shape(x.shape, axes);
               const double count = static_cast<double>(reduced_count(x.shape, axes));
               // Two passes (mean, then squared deviations): no cancellation for large means.
               std::vector<double> mean(numel(kept), 0.0);
               for_each_reduced(x.shape, kept, [&](int64_t i, int64_t o) { mean[o] += x.data[i]; });
               for (double& m : mean) m /= count;
               Array out(n.type.shape, n.type.dtype);
               for_each_reduced(x.shape, kept, [&](int64_t i, int64_t o) {
                 double d = x.data[i] - mean[o];
                 out.data[o] += d * d;
               });
               for (double& v : out.data) v /= count - static_cast<double>(a.correction);
               return out;
             },
         .vjp =
             [](const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
               const auto& a = n.attrs.as<VarianceAttrs>();
               Tensor x = in[0];
               auto axes = ops::normalize_axes(a.axes, x.rank(), "variance");
               const Shape kept = kept_shape(x.shape(), axes);
               double denom = static_cast<double>(reduced_count(x.shape(), axes) - a.correction);
               Tensor centered = x - mean(x, axes, /*keepdims=*/true);
               return std::vector<Tensor>{(to_kept(g, kept) * centered) * 2.0 / denom};
             },
         .decompose =
             [](const Node& n, std::span<const Tensor> in) {
               const auto& a = n.attrs.as<VarianceAttrs>();
               Tensor x = in[0];
               auto axes = ops::normalize_axes(a.axes, x.rank(), "variance");
               double denom = static_cast<double>(reduced_count(x.shape(), axes) - a.correction);
               Tensor centered = x - mean(x, axes, /*keepdims=*/true);
               return sum(centered * centered, axes, a.keepdims) / denom;
             },
         .samples =
             [] {
               std::vector<OpSample> s;
               auto add = [&](const char* label, Shape shape, std::vector<int64_t> axes,
                              bool keepdims, int64_t correction, DType t = DType::f32,
                              std::pair<double, double> range = {-2, 2}) {
                 s.push_back({.label = label,
                              .inputs = {{std::move(shape), t}},
                              .attrs = VarianceAttrs{std::move(axes), keepdims, correction},
                              .ranges = {range}});
               };
               add("all_biased", {3, 4, 5}, {}, false, 0);
               add("all_unbiased", {3, 4, 5}, {}, false, 1);
               add("last_keepdims", {3, 4, 5}, {-1}, true, 1);
               add("outer_two", {3, 4, 5}, {0, 2}, false, 0);
               add("pair_unbiased", {4, 2}, {1}, false, 1);
               // A large mean: a one-pass formula would cancel.
               add("long_rows_offset", {2, 300}, {1}, false, 1, DType::f32, {1000, 1004});
               add("f16_columns", {70, 3}, {0}, false, 1, DType::f16);
               add("bf16_rows", {3, 70}, {-1}, true, 0, DType::bf16);
               return s;
             },
         .summary = "sum of squared deviations / (count - correction)"});
}

void register_sum_to(OpRegistry& r) {
  r.add({.name = "sum_to",
         .arity = 1,
         .archetype = Archetype::reduction,
         .differentiable = true,
         .infer =
             [](const Attrs& attrs, std::span<const TensorType> in) {
               const Shape& target = attrs.as<SumToAttrs>().shape;
               const std::string want = "a shape that " + shape_str(target) + " broadcasts to";
               for (int64_t d : target) {
                 if (d <= 0) shape_fail("sum_to", in, want + " (target dims must be positive)");
               }
               if (target.size() > in[0].shape.size()) shape_fail("sum_to", in, want);
               try {
                 if (broadcast_shapes(target, in[0].shape, "sum_to") != in[0].shape) {
                   shape_fail("sum_to", in, want);
                 }
               } catch (const ShapeError&) {
                 shape_fail("sum_to", in, want);
               }
               return TensorType{target, in[0].dtype};
             },
         .eval =
             [](const Node& n, std::span<const Array* const> in) {
               const Array& x = *in[0];
               Array out(n.type.shape, n.type.dtype);
               for_each_reduced(x.shape, n.type.shape,
                                [&](int64_t i, int64_t o) { out.data[o] += x.data[i]; });
               return out;
             },
         .vjp = [](const Node&, std::span<const Tensor> in, Tensor,
                   Tensor g) { return std::vector<Tensor>{broadcast_to(g, in[0].shape())}; },
         .samples =
             [] {
               std::vector<OpSample> s;
               auto add = [&](const char* label, Shape from, Shape to, DType t = DType::f32) {
                 s.push_back({.label = label,
                              .inputs = {{std::move(from), t}},
                              .attrs = SumToAttrs{std::move(to)},
                              .ranges = {{-2, 2}}});
               };
               add("rows_to_row", {3, 4}, {4});
               add("to_column", {3, 4}, {3, 1});
               add("batch_to_ones", {2, 3, 4}, {1, 4});
               add("to_scalar", {2, 3}, {});
               add("middle", {2, 3, 4}, {2, 1, 4});
               add("identity", {2, 3}, {2, 3});
               add("long_batch_to_row", {300, 4}, {4});
               add("f16_to_column", {3, 70}, {3, 1}, DType::f16);
               add("bf16_batch_to_row", {2, 5, 4}, {4}, DType::bf16);
               return s;
             },
         .summary = "sums a broadcast tensor back to a shape (adjoint of broadcast_to)"});
}

std::vector<int64_t> public_axes(const char* op, Tensor x, const std::vector<int64_t>& axes) {
  const TensorType& t = x.type();
  return reduce_axes(op, std::span<const TensorType>(&t, 1), axes);
}

}  // namespace

Tensor sum(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return x.graph().apply("sum", ReduceAttrs{public_axes("sum", x, axes), keepdims}, {x});
}
Tensor mean(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return x.graph().apply("mean", ReduceAttrs{public_axes("mean", x, axes), keepdims}, {x});
}
Tensor max(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return x.graph().apply("max", ReduceAttrs{public_axes("max", x, axes), keepdims}, {x});
}
Tensor min(Tensor x, std::vector<int64_t> axes, bool keepdims) {
  return x.graph().apply("min", ReduceAttrs{public_axes("min", x, axes), keepdims}, {x});
}
Tensor argmax(Tensor x, int64_t axis, bool keepdims) {
  if (x.valid() && x.rank() > 0) axis = public_axes("argmax", x, {axis})[0];
  return x.graph().apply("argmax", ArgmaxAttrs{axis, keepdims}, {x});
}
Tensor variance(Tensor x, std::vector<int64_t> axes, bool keepdims, int64_t correction) {
  return x.graph().apply(
      "variance", VarianceAttrs{public_axes("variance", x, axes), keepdims, correction}, {x});
}
Tensor sum_to(Tensor x, const Shape& shape) {
  if (x.valid() && x.shape() == shape) return x;
  return x.graph().apply("sum_to", SumToAttrs{shape}, {x});
}

void register_reduce_ops(OpRegistry& r) {
  r.add(reduce_op("sum", Kind::sum, "sum over axes"));
  r.add(reduce_op("mean", Kind::mean, "mean over axes"));
  r.add(reduce_op("max", Kind::max, "maximum over axes (ties share the gradient)"));
  r.add(reduce_op("min", Kind::min, "minimum over axes (ties share the gradient)"));
  register_argmax(r);
  register_variance(r);
  register_sum_to(r);
}

}  // namespace mn
