// Shape ops that only rearrange or replicate elements: reshape, permute, transpose, broadcast_to,
// squeeze, unsqueeze. The reference materializes them; the scheduler decides which stay views.
#include "ir/ops/shape.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"

namespace mn {

namespace ops::shape_detail {

int64_t axis_in(std::string_view op, std::span<const TensorType> in, int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    shape_fail(op, in,
               "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  }
  return a;
}

Shape resolve_reshape(std::string_view op, std::span<const TensorType> in, const Shape& target) {
  const int64_t total = in[0].numel();
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (infer_at >= 0) shape_fail(op, in, "at most one -1 in target shape " + shape_str(target));
      infer_at = static_cast<int>(i);
    } else if (target[i] <= 0) {
      shape_fail(op, in, "positive sizes or one -1 in target shape " + shape_str(target));
    } else if (__builtin_mul_overflow(known, target[i], &known)) {
      shape_fail(op, in,
                 "a target shape whose product fits int64, got " + shape_str(target) +
                     " (its product overflows)");
    }
  }
  Shape out = target;
  if (infer_at >= 0) {
    if (total % known != 0) {
      shape_fail(op, in,
                 "a target shape " + shape_str(target) + " whose known sizes divide the " +
                     std::to_string(total) + " elements");
    }
    out[infer_at] = total / known;
  } else if (known != total) {
    shape_fail(op, in,
               "target shape " + shape_str(target) + " with " + std::to_string(known) +
                   " elements to match the input's " + std::to_string(total));
  }
  return out;
}

std::vector<int64_t> resolve_perm(std::string_view op, std::span<const TensorType> in,
                                  const std::vector<int64_t>& perm) {
  const int rank = in[0].rank();
  if (static_cast<int>(perm.size()) != rank) {
    shape_fail(op, in,
               "a permutation of " + std::to_string(rank) + " axes, got " + shape_str(perm));
  }
  std::vector<int64_t> out(perm.size());
  std::vector<char> seen(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t a = perm[i] < 0 ? perm[i] + rank : perm[i];
    if (a < 0 || a >= rank || seen[a]) {
      shape_fail(op, in, "a permutation of the axes, got " + shape_str(perm));
    }
    seen[a] = 1;
    out[i] = a;
  }
  return out;
}

std::vector<int64_t> resolve_squeeze(std::string_view op, std::span<const TensorType> in,
                                     const std::vector<int64_t>& axes) {
  const Shape& s = in[0].shape;
  const int rank = in[0].rank();
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int i = 0; i < rank; ++i) {
      if (s[i] == 1) out.push_back(i);
    }
    return out;
  }
  for (int64_t a : axes) {
    int64_t n = axis_in(op, in, a, rank);
    if (s[n] != 1) {
      shape_fail(op, in,
                 "axis " + std::to_string(a) + " to have size 1, it has " + std::to_string(s[n]));
    }
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t resolve_unsqueeze(std::string_view op, std::span<const TensorType> in, int64_t axis) {
  return axis_in(op, in, axis, in[0].rank() + 1);
}

AxisSplit split_at(std::span<const int64_t> shape, int axis) {
  AxisSplit s;
  for (int i = 0; i < axis; ++i) s.outer *= shape[i];
  s.n = shape[axis];
  for (size_t i = axis + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

OpSample float_sample(std::string label, std::vector<Shape> shapes, Attrs attrs) {
  OpSample s;
  s.label = std::move(label);
  s.attrs = std::move(attrs);
  for (auto& sh : shapes) {
    s.inputs.push_back({std::move(sh), DType::f32});
    s.ranges.emplace_back(-1.0, 1.0);
    s.no_grad.push_back(false);
  }
  return s;
}

namespace {

// Same values, new shape: the element order of a row-major tensor does not change.
Array relabel(const Node& n, const Array& x) { return Array(n.type.shape, n.type.dtype, x.data); }

std::vector<Tensor> reshape_back(std::span<const Tensor> in, Tensor cot) {
  return {reshape(cot, in[0].shape())};
}

// Gathers x through arbitrary per-output-axis strides (permutation or broadcast).
Array gather_strided(const Node& n, const Array& x, std::vector<int64_t> strides) {
  Array out(n.type.shape, n.type.dtype);
  std::array<std::vector<int64_t>, 1> s{std::move(strides)};
  for_each_broadcast<1>(out.shape, s, [&](int64_t i, const std::array<int64_t, 1>& o) {
    out.data[i] = x.data[o[0]];
  });
  return out;
}

Array eval_permute(const Node& n, const Array& x, const std::vector<int64_t>& perm) {
  auto xs = contiguous_strides(x.shape);
  std::vector<int64_t> s(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) s[d] = xs[perm[d]];
  return gather_strided(n, x, std::move(s));
}

std::vector<int64_t> transpose_perm(std::string_view op, std::span<const TensorType> in,
                                    const TransposeAttrs& a) {
  const int rank = in[0].rank();
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[axis_in(op, in, a.axis0, rank)], perm[axis_in(op, in, a.axis1, rank)]);
  return perm;
}

Shape permuted(const Shape& s, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) out[d] = s[perm[d]];
  return out;
}

TensorType infer_broadcast_to(std::span<const TensorType> in, const Shape& target) {
  const Shape& s = in[0].shape;
  for (int64_t d : target) {
    if (d <= 0) shape_fail("broadcast_to", in, "a positive target shape, got " + shape_str(target));
  }
  if (s.size() > target.size()) {
    shape_fail("broadcast_to", in,
               "a target shape " + shape_str(target) + " of at least the input's rank");
  }
  const size_t lead = target.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 1 && s[i] != target[lead + i]) {
      shape_fail("broadcast_to", in,
                 "each input axis to be 1 or equal to the target's, target " + shape_str(target));
    }
  }
  return {target, in[0].dtype};
}

std::vector<OpSample> reshape_samples() {
  return {float_sample("flatten", {{2, 3, 4}}, ReshapeAttrs{{6, 4}}),
          float_sample("infer", {{2, 3, 4}}, ReshapeAttrs{{-1, 2}}),
          float_sample("to_scalar", {{1, 1}}, ReshapeAttrs{{}}),
          float_sample("from_scalar", {{}}, ReshapeAttrs{{1, 1, 1}}),
          float_sample("split_axes", {{12}}, ReshapeAttrs{{2, 1, 3, 2}})};
}

std::vector<OpSample> permute_samples() {
  return {float_sample("2d", {{3, 4}}, PermuteAttrs{{1, 0}}),
          float_sample("3d", {{2, 3, 4}}, PermuteAttrs{{2, 0, 1}}),
          float_sample("negative", {{2, 3, 1, 4}}, PermuteAttrs{{-1, 0, -2, 1}}),
          float_sample("identity", {{3, 2}}, PermuteAttrs{{0, 1}}),
          float_sample("1d", {{5}}, PermuteAttrs{{0}})};
}

std::vector<OpSample> transpose_samples() {
  return {float_sample("last_two", {{2, 3, 4}}, TransposeAttrs{-2, -1}),
          float_sample("outer", {{2, 3, 4}}, TransposeAttrs{0, 2}),
          float_sample("same_axis", {{3, 4}}, TransposeAttrs{1, -1}),
          float_sample("2d", {{5, 3}}, TransposeAttrs{0, 1})};
}

std::vector<OpSample> broadcast_to_samples() {
  return {float_sample("row", {{4}}, BroadcastToAttrs{{3, 4}}),
          float_sample("column", {{3, 1}}, BroadcastToAttrs{{3, 4}}),
          float_sample("scalar", {{}}, BroadcastToAttrs{{2, 3}}),
          float_sample("batch", {{1, 3, 1}}, BroadcastToAttrs{{2, 2, 3, 4}}),
          float_sample("identity", {{2, 3}}, BroadcastToAttrs{{2, 3}})};
}

std::vector<OpSample> squeeze_samples() {
  return {float_sample("all", {{1, 3, 1, 2}}, SqueezeAttrs{{}}),
          float_sample("one", {{1, 3, 1, 2}}, SqueezeAttrs{{2}}),
          float_sample("negative", {{2, 3, 1}}, SqueezeAttrs{{-1}}),
          float_sample("to_scalar", {{1, 1}}, SqueezeAttrs{{}}),
          float_sample("nothing", {{2, 3}}, SqueezeAttrs{{}})};
}

std::vector<OpSample> unsqueeze_samples() {
  return {float_sample("front", {{2, 3}}, UnsqueezeAttrs{0}),
          float_sample("middle", {{2, 3}}, UnsqueezeAttrs{1}),
          float_sample("append", {{2, 3}}, UnsqueezeAttrs{-1}),
          float_sample("negative_middle", {{2, 3}}, UnsqueezeAttrs{-2}),
          float_sample("scalar", {{}}, UnsqueezeAttrs{0})};
}

}  // namespace

void register_shape_view_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "reshape",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        return {resolve_reshape("reshape", in, a.as<ReshapeAttrs>().shape), in[0].dtype};
      },
      .eval = [](const Node& n, std::span<const Array* const> in) { return relabel(n, *in[0]); },
      .vjp = [](const Node&, std::span<const Tensor> in, Tensor,
                Tensor cot) { return reshape_back(in, cot); },
      .samples = reshape_samples,
      .summary = "same elements in a new shape (one -1 is inferred)",
  });
  r.add(OpDef{
      .name = "permute",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        return {permuted(in[0].shape, resolve_perm("permute", in, a.as<PermuteAttrs>().perm)),
                in[0].dtype};
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            TensorType t = in[0]->type();
            return eval_permute(n, *in[0],
                                resolve_perm("permute", {&t, 1}, n.attrs.as<PermuteAttrs>().perm));
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            TensorType t = in[0].type();
            auto perm = resolve_perm("permute", {&t, 1}, n.attrs.as<PermuteAttrs>().perm);
            std::vector<int64_t> inverse(perm.size());
            for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
            return std::vector<Tensor>{permute(cot, inverse)};
          },
      .samples = permute_samples,
      .summary = "reorders axes: out.shape[d] = x.shape[perm[d]]",
  });
  r.add(OpDef{
      .name = "transpose",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        return {permuted(in[0].shape, transpose_perm("transpose", in, a.as<TransposeAttrs>())),
                in[0].dtype};
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            TensorType t = in[0]->type();
            return eval_permute(n, *in[0],
                                transpose_perm("transpose", {&t, 1}, n.attrs.as<TransposeAttrs>()));
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            const auto& a = n.attrs.as<TransposeAttrs>();
            return std::vector<Tensor>{transpose(cot, a.axis0, a.axis1)};
          },
      .decompose =
          [](const Node& n, std::span<const Tensor> in) {
            TensorType t = in[0].type();
            return permute(in[0],
                           transpose_perm("transpose", {&t, 1}, n.attrs.as<TransposeAttrs>()));
          },
      .samples = transpose_samples,
      .summary = "swaps two axes (a permute)",
  });
  r.add(OpDef{
      .name = "broadcast_to",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        return infer_broadcast_to(in, a.as<BroadcastToAttrs>().shape);
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            return gather_strided(n, *in[0], broadcast_strides(in[0]->shape, n.type.shape));
          },
      .vjp =
          [](const Node&, std::span<const Tensor> in, Tensor out, Tensor cot) {
            if (in[0].shape() == out.shape()) return std::vector<Tensor>{cot};
            return std::vector<Tensor>{sum_to(cot, in[0].shape())};
          },
      .samples = broadcast_to_samples,
      .summary = "repeats size-1 and missing leading axes to a shape (numpy rules)",
  });
  r.add(OpDef{
      .name = "squeeze",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        auto axes = resolve_squeeze("squeeze", in, a.as<SqueezeAttrs>().axes);
        Shape out;
        for (int i = 0; i < in[0].rank(); ++i) {
          if (!std::binary_search(axes.begin(), axes.end(), i)) out.push_back(in[0].shape[i]);
        }
        return {out, in[0].dtype};
      },
      .eval = [](const Node& n, std::span<const Array* const> in) { return relabel(n, *in[0]); },
      .vjp = [](const Node&, std::span<const Tensor> in, Tensor,
                Tensor cot) { return reshape_back(in, cot); },
      .samples = squeeze_samples,
      .summary = "removes size-1 axes (all of them when no axes are given)",
  });
  r.add(OpDef{
      .name = "unsqueeze",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        Shape out = in[0].shape;
        out.insert(out.begin() + resolve_unsqueeze("unsqueeze", in, a.as<UnsqueezeAttrs>().axis),
                   1);
        return {out, in[0].dtype};
      },
      .eval = [](const Node& n, std::span<const Array* const> in) { return relabel(n, *in[0]); },
      .vjp = [](const Node&, std::span<const Tensor> in, Tensor,
                Tensor cot) { return reshape_back(in, cot); },
      .samples = unsqueeze_samples,
      .summary = "inserts a size-1 axis (a negative axis counts in the output rank)",
  });
}

}  // namespace ops::shape_detail

using namespace ops::shape_detail;

Tensor reshape(Tensor x, Shape shape) {
  TensorType t = x.type();
  Shape resolved = resolve_reshape("reshape", {&t, 1}, shape);
  if (resolved == t.shape) return x;
  return x.graph().apply("reshape", ReshapeAttrs{std::move(resolved)}, {x});
}

Tensor permute(Tensor x, std::vector<int64_t> perm) {
  TensorType t = x.type();
  auto resolved = resolve_perm("permute", {&t, 1}, perm);
  return x.graph().apply("permute", PermuteAttrs{std::move(resolved)}, {x});
}

Tensor transpose(Tensor x, int64_t axis0, int64_t axis1) {
  TensorType t = x.type();
  const int rank = t.rank();
  int64_t a0 = axis_in("transpose", {&t, 1}, axis0, rank);
  int64_t a1 = axis_in("transpose", {&t, 1}, axis1, rank);
  if (a0 == a1) return x;
  return x.graph().apply("transpose", TransposeAttrs{std::min(a0, a1), std::max(a0, a1)}, {x});
}

Tensor broadcast_to(Tensor x, Shape shape) {
  if (x.shape() == shape) return x;
  return x.graph().apply("broadcast_to", BroadcastToAttrs{std::move(shape)}, {x});
}

Tensor squeeze(Tensor x, std::vector<int64_t> axes) {
  TensorType t = x.type();
  auto resolved = resolve_squeeze("squeeze", {&t, 1}, axes);
  // Stored explicitly: "all size-1 axes" is relative to the input, explicit axes are not.
  if (resolved.empty()) return x;
  return x.graph().apply("squeeze", SqueezeAttrs{std::move(resolved)}, {x});
}

Tensor unsqueeze(Tensor x, int64_t axis) {
  TensorType t = x.type();
  return x.graph().apply("unsqueeze", UnsqueezeAttrs{resolve_unsqueeze("unsqueeze", {&t, 1}, axis)},
                         {x});
}

void register_shape_ops(OpRegistry& r) {
  register_shape_view_ops(r);
  register_shape_slice_ops(r);
  register_shape_index_ops(r);
}

}  // namespace mn
