// Indexed ops: take (gather along an axis, the embedding lookup), its adjoint scatter_add, and
// one_hot. Index operands are i32; an index outside the axis is an error in the reference.
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/shape.h"

namespace mn {

namespace ops::shape_detail {

namespace {

void require_indices(std::string_view op, std::span<const TensorType> in, size_t i) {
  if (in[i].dtype != DType::i32) {
    shape_fail(op, in, "i32 indices as operand " + std::to_string(i));
  }
}

// x.shape[:axis] + indices.shape + x.shape[axis+1:]
Shape indexed_shape(const Shape& x, int64_t axis, const Shape& indices) {
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return out;
}

int64_t take_axis(std::string_view op, std::span<const TensorType> in, int64_t axis) {
  if (in[0].rank() == 0) shape_fail(op, in, "an operand of rank at least 1");
  require_indices(op, in, 1);
  return axis_in(op, in, axis, in[0].rank());
}

// The reference checks every index once, before any arithmetic, so the error names the first
// bad one in storage order.
void check_indices(std::string_view op, const Array& indices, int64_t n, int64_t axis,
                   const Shape& x_shape) {
  for (size_t k = 0; k < indices.data.size(); ++k) {
    const double v = indices.data[k];
    if (v < 0 || v >= static_cast<double>(n)) {
      throw IndexError(std::string(op) + ": index " + std::to_string(static_cast<int64_t>(v)) +
                       " (element " + std::to_string(k) + " of the indices) is out of range [0, " +
                       std::to_string(n) + ") along axis " + std::to_string(axis) + " of shape " +
                       shape_str(x_shape));
    }
  }
}

OpSample with_indices(OpSample s, size_t i, int64_t bound) {
  s.inputs[i].dtype = DType::i32;
  s.ranges[i] = {0.0, static_cast<double>(bound)};
  s.no_grad[i] = true;
  return s;
}

std::vector<OpSample> take_samples() {
  return {with_indices(float_sample("rows", {{5, 3}, {4}}, TakeAttrs{0}), 1, 5),
          with_indices(float_sample("embedding", {{10, 4}, {2, 3}}, TakeAttrs{0}), 1, 10),
          with_indices(float_sample("middle_axis", {{2, 4, 3}, {2, 3}}, TakeAttrs{1}), 1, 4),
          with_indices(float_sample("scalar_index", {{3, 4}, {}}, TakeAttrs{-1}), 1, 4),
          with_indices(float_sample("repeated", {{2, 3}, {6}}, TakeAttrs{-1}), 1, 3)};
}

std::vector<OpSample> scatter_add_samples() {
  // More indices than rows, so duplicates (accumulation) occur.
  return {with_indices(float_sample("rows", {{5, 3}, {7}, {7, 3}}, ScatterAddAttrs{0}), 1, 5),
          with_indices(float_sample("last_axis", {{2, 4}, {3}, {2, 3}}, ScatterAddAttrs{-1}), 1, 4),
          with_indices(float_sample("nd_indices", {{4, 2}, {2, 3}, {2, 3, 2}}, ScatterAddAttrs{0}),
                       1, 4),
          with_indices(float_sample("scalar_index", {{3, 2}, {}, {2}}, ScatterAddAttrs{0}), 1, 3)};
}

std::vector<OpSample> one_hot_samples() {
  auto s = [](std::string label, Shape shape, int64_t depth, DType t) {
    return with_indices(float_sample(std::move(label), {std::move(shape)}, OneHotAttrs{depth, t}),
                        0, depth);
  };
  return {s("vector", {4}, 5, DType::f32), s("matrix", {2, 3}, 3, DType::f32),
          s("scalar", {}, 4, DType::f32), s("half", {3}, 2, DType::f16),
          s("single_class", {2}, 1, DType::f32)};
}

}  // namespace

void register_shape_index_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "take",
      .arity = 2,
      .archetype = Archetype::gather_scatter,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        const int64_t axis = take_axis("take", in, a.as<TakeAttrs>().axis);
        return {indexed_shape(in[0].shape, axis, in[1].shape), in[0].dtype};
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const Array& x = *in[0];
            const Array& idx = *in[1];
            const int axis = normalize_axis(n.attrs.as<TakeAttrs>().axis, x.rank(), "take");
            const AxisSplit s = split_at(x.shape, axis);
            check_indices("take", idx, s.n, axis, x.shape);
            const int64_t k_count = idx.numel();
            Array out(n.type.shape, n.type.dtype);
            double* o = out.data.data();
            for (int64_t outer = 0; outer < s.outer; ++outer) {
              for (int64_t k = 0; k < k_count; ++k) {
                const auto row = static_cast<int64_t>(idx.data[k]);
                const double* p = x.data.data() + (outer * s.n + row) * s.inner;
                o = std::copy(p, p + s.inner, o);
              }
            }
            return out;
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            const int64_t axis = n.attrs.as<TakeAttrs>().axis;
            Tensor zeros = broadcast_to(scalar_like(cot, 0.0), in[0].shape());
            return std::vector<Tensor>{scatter_add(zeros, in[1], cot, axis), Tensor{}};
          },
      .samples = take_samples,
      .summary = "out[..., i, ...] = x[..., indices[i], ...] along an axis (i32 indices)",
  });
  r.add(OpDef{
      .name = "scatter_add",
      .arity = 3,
      .archetype = Archetype::gather_scatter,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        const int64_t axis = take_axis("scatter_add", in, a.as<ScatterAddAttrs>().axis);
        if (in[2].dtype != in[0].dtype) shape_fail("scatter_add", in, "updates of x's dtype");
        Shape want = indexed_shape(in[0].shape, axis, in[1].shape);
        if (in[2].shape != want) {
          shape_fail("scatter_add", in, "updates of shape " + shape_str(want));
        }
        return in[0];
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const Array& idx = *in[1];
            const Array& upd = *in[2];
            const int axis =
                normalize_axis(n.attrs.as<ScatterAddAttrs>().axis, in[0]->rank(), "scatter_add");
            const AxisSplit s = split_at(in[0]->shape, axis);
            check_indices("scatter_add", idx, s.n, axis, in[0]->shape);
            const int64_t k_count = idx.numel();
            Array out = *in[0];
            const double* u = upd.data.data();
            for (int64_t outer = 0; outer < s.outer; ++outer) {
              for (int64_t k = 0; k < k_count; ++k) {
                const auto row = static_cast<int64_t>(idx.data[k]);
                double* p = out.data.data() + (outer * s.n + row) * s.inner;
                for (int64_t j = 0; j < s.inner; ++j) p[j] += *u++;
              }
            }
            return out;
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            const int64_t axis = n.attrs.as<ScatterAddAttrs>().axis;
            return std::vector<Tensor>{cot, Tensor{}, take(cot, in[1], axis)};
          },
      .samples = scatter_add_samples,
      .summary = "out = x; out[..., indices[i], ...] += updates[..., i, ...] (adjoint of take)",
  });
  r.add(OpDef{
      .name = "one_hot",
      .arity = 1,
      .archetype = Archetype::pointwise,
      .differentiable = false,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        const auto& o = a.as<OneHotAttrs>();
        require_indices("one_hot", in, 0);
        if (o.depth <= 0) {
          shape_fail("one_hot", in, "a positive depth, got " + std::to_string(o.depth));
        }
        Shape out = in[0].shape;
        out.push_back(o.depth);
        return {out, o.dtype};
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const Array& idx = *in[0];
            const int64_t depth = n.attrs.as<OneHotAttrs>().depth;
            for (size_t k = 0; k < idx.data.size(); ++k) {
              const double v = idx.data[k];
              if (v < 0 || v >= static_cast<double>(depth)) {
                throw IndexError("one_hot: index " + std::to_string(static_cast<int64_t>(v)) +
                                 " (element " + std::to_string(k) + ") is out of range [0, " +
                                 std::to_string(depth) + ")");
              }
            }
            Array out(n.type.shape, n.type.dtype);
            for (size_t k = 0; k < idx.data.size(); ++k) {
              out.data[k * depth + static_cast<int64_t>(idx.data[k])] = 1.0;
            }
            return out;
          },
      .samples = one_hot_samples,
      .summary = "i32 class indices to [..., depth] rows of 0/1 (out-of-range index: error)",
  });
}

}  // namespace ops::shape_detail

using namespace ops::shape_detail;

Tensor take(Tensor x, Tensor indices, int64_t axis) {
  if (!indices.valid()) throw Error("take: indices is an empty Tensor");
  std::vector<TensorType> t{x.type(), indices.type()};
  return x.graph().apply("take", TakeAttrs{take_axis("take", t, axis)}, {x, indices});
}

Tensor scatter_add(Tensor x, Tensor indices, Tensor updates, int64_t axis) {
  if (!indices.valid()) throw Error("scatter_add: indices is an empty Tensor");
  std::vector<TensorType> t{x.type(), indices.type()};
  return x.graph().apply("scatter_add", ScatterAddAttrs{take_axis("scatter_add", t, axis)},
                         {x, indices, updates});
}

Tensor one_hot(Tensor indices, int64_t depth, DType dtype) {
  return indices.graph().apply("one_hot", OneHotAttrs{depth, dtype}, {indices});
}

}  // namespace mn
