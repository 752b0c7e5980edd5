// Ops that select or assemble ranges of axes: slice (and its strided adjoint unslice), split,
// concat, pad. Their vjps are each other: slice <-> pad/unslice, concat <-> slice, split -> pad.
#include <algorithm>
#include <string>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/shape.h"

namespace mn {

namespace ops::shape_detail {

SliceAttrs resolve_slice(std::string_view op, std::span<const TensorType> in, const SliceAttrs& a) {
  const int rank = in[0].rank();
  if (rank == 0) shape_fail(op, in, "an operand of rank at least 1");
  const int64_t axis = axis_in(op, in, a.axis, rank);
  if (a.step <= 0) shape_fail(op, in, "a positive step, got " + std::to_string(a.step));
  const int64_t n = in[0].shape[axis];
  // Python's rules for a positive step: negative bounds count from the end, then clamp.
  auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
  const int64_t start = clamp(a.start), stop = clamp(a.stop);
  const int64_t len = stop > start ? (stop - start + a.step - 1) / a.step : 0;
  if (len == 0) {
    shape_fail(op, in,
               "a non-empty slice, got [" + std::to_string(a.start) + ":" + std::to_string(a.stop) +
                   ":" + std::to_string(a.step) + "] of axis " + std::to_string(a.axis) +
                   " (zero-sized tensors are not supported)");
  }
  // Canonical: the smallest stop that selects the same elements.
  return {axis, start, start + (len - 1) * a.step + 1, a.step};
}

int64_t slice_length(const SliceAttrs& r) { return (r.stop - r.start + r.step - 1) / r.step; }

PadAttrs resolve_pad(std::string_view op, std::span<const TensorType> in, const PadAttrs& a) {
  const size_t rank = in[0].shape.size();
  if (a.before.size() != a.after.size()) {
    shape_fail(op, in, "as many 'before' as 'after' pads");
  }
  if (a.before.size() > rank) {
    shape_fail(op, in,
               "at most " + std::to_string(rank) + " (before, after) pairs, got " +
                   std::to_string(a.before.size()));
  }
  PadAttrs out{a.before, a.after, a.value};
  out.before.resize(rank, 0);
  out.after.resize(rank, 0);
  for (size_t i = 0; i < rank; ++i) {
    if (out.before[i] < 0 || out.after[i] < 0) {
      shape_fail(op, in,
                 "non-negative pads, axis " + std::to_string(i) + " has (" +
                     std::to_string(out.before[i]) + ", " + std::to_string(out.after[i]) + ")");
    }
  }
  return out;
}

namespace {

// Copies x into `out` through per-axis output strides, starting at element `base` of out.
void scatter_strided(const Array& x, Array& out, std::vector<int64_t> out_strides, int64_t base) {
  std::array<std::vector<int64_t>, 1> s{std::move(out_strides)};
  for_each_broadcast<1>(x.shape, s, [&](int64_t i, const std::array<int64_t, 1>& o) {
    out.data[base + o[0]] = x.data[i];
  });
}

// Reads out[i] = x[base + offset(i)] through per-axis input strides.
Array gather_strided(const Node& n, const Array& x, std::vector<int64_t> in_strides, int64_t base) {
  Array out(n.type.shape, n.type.dtype);
  std::array<std::vector<int64_t>, 1> s{std::move(in_strides)};
  for_each_broadcast<1>(out.shape, s, [&](int64_t i, const std::array<int64_t, 1>& o) {
    out.data[i] = x.data[base + o[0]];
  });
  return out;
}

// Copies the block [from, from + len) along `axis` of src into [to, to + len) of dst.
void copy_axis_block(const Array& src, int64_t from, Array& dst, int64_t to, int64_t len,
                     int axis) {
  const AxisSplit s = split_at(src.shape, axis);
  const AxisSplit d = split_at(dst.shape, axis);
  const int64_t run = len * s.inner;
  for (int64_t o = 0; o < s.outer; ++o) {
    const double* p = src.data.data() + (o * s.n + from) * s.inner;
    std::copy(p, p + run, dst.data.data() + (o * d.n + to) * d.inner);
  }
}

SliceAttrs resolved_slice(const Node& n, std::span<const TensorType> in) {
  return resolve_slice("slice", in, n.attrs.as<SliceAttrs>());
}

std::vector<std::pair<int64_t, int64_t>> pad_axis(int64_t axis, int64_t before, int64_t after) {
  std::vector<std::pair<int64_t, int64_t>> p(axis + 1, {0, 0});
  p[axis] = {before, after};
  return p;
}

TensorType infer_unslice(std::span<const TensorType> in, const UnsliceAttrs& a) {
  const char* op = "unslice";
  const int rank = in[0].rank();
  if (rank == 0) shape_fail(op, in, "an operand of rank at least 1");
  const int64_t axis = axis_in(op, in, a.axis, rank);
  const int64_t len = in[0].shape[axis];
  if (a.step <= 0 || a.start < 0 || a.start + (len - 1) * a.step >= a.size) {
    shape_fail(op, in,
               std::to_string(len) + " positions from " + std::to_string(a.start) + " by step " +
                   std::to_string(a.step) + " inside size " + std::to_string(a.size));
  }
  TensorType out = in[0];
  out.shape[axis] = a.size;
  return out;
}

struct SplitPiece {
  int64_t axis;
  int64_t offset;
  int64_t size;
  int64_t total;
};

SplitPiece resolve_split(std::span<const TensorType> in, const SplitAttrs& a) {
  const char* op = "split";
  const int rank = in[0].rank();
  if (rank == 0) shape_fail(op, in, "an operand of rank at least 1");
  const int64_t axis = axis_in(op, in, a.axis, rank);
  int64_t total = 0, offset = 0;
  for (size_t i = 0; i < a.sizes.size(); ++i) {
    if (a.sizes[i] <= 0) shape_fail(op, in, "positive sizes, got " + shape_str(a.sizes));
    if (static_cast<int64_t>(i) < a.index) offset += a.sizes[i];
    total += a.sizes[i];
  }
  if (total != in[0].shape[axis]) {
    shape_fail(op, in,
               "sizes " + shape_str(a.sizes) + " summing to axis " + std::to_string(a.axis) +
                   "'s " + std::to_string(in[0].shape[axis]));
  }
  if (a.index < 0 || a.index >= static_cast<int64_t>(a.sizes.size())) {
    shape_fail(op, in,
               "a piece index in [0, " + std::to_string(a.sizes.size()) + "), got " +
                   std::to_string(a.index));
  }
  return {axis, offset, a.sizes[a.index], total};
}

TensorType infer_concat(std::span<const TensorType> in, int64_t raw_axis) {
  const char* op = "concat";
  const int rank = in[0].rank();
  if (rank == 0) shape_fail(op, in, "operands of rank at least 1");
  const int64_t axis = axis_in(op, in, raw_axis, rank);
  TensorType out = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype) shape_fail(op, in, "operands of one dtype");
    bool same = in[i].rank() == rank;
    for (int d = 0; same && d < rank; ++d) same = d == axis || in[i].shape[d] == in[0].shape[d];
    if (!same) {
      shape_fail(op, in, "equal shapes except along axis " + std::to_string(raw_axis));
    }
    if (__builtin_add_overflow(out.shape[axis], in[i].shape[axis], &out.shape[axis])) {
      shape_fail(op, in,
                 "a total size along axis " + std::to_string(raw_axis) + " that fits int64");
    }
  }
  return out;
}

std::vector<TensorType> types_of(std::span<const Array* const> in) {
  std::vector<TensorType> t;
  for (const Array* a : in) t.push_back(a->type());
  return t;
}

std::vector<TensorType> types_of(std::span<const Tensor> in) {
  std::vector<TensorType> t;
  for (const Tensor& x : in) t.push_back(x.type());
  return t;
}

std::vector<OpSample> slice_samples() {
  return {float_sample("basic", {{4, 5}}, SliceAttrs{1, 1, 4, 1}),
          float_sample("negative", {{6, 3}}, SliceAttrs{-2, -4, -1, 1}),
          float_sample("step", {{7, 2}}, SliceAttrs{0, 1, 7, 2}),
          float_sample("out_of_range", {{3, 8}}, SliceAttrs{1, -10, 100, 3}),
          float_sample("batch", {{2, 3, 5}}, SliceAttrs{-1, 0, 5, 2}),
          float_sample("single", {{5}}, SliceAttrs{0, 4, 5, 1})};
}

std::vector<OpSample> unslice_samples() {
  return {float_sample("strided", {{2, 3}}, UnsliceAttrs{1, 7, 1, 2}),
          float_sample("leading", {{2, 3}}, UnsliceAttrs{-2, 5, 0, 3}),
          float_sample("unit", {{4}}, UnsliceAttrs{0, 6, 2, 1})};
}

std::vector<OpSample> split_samples() {
  return {float_sample("first", {{5, 3}}, SplitAttrs{0, {2, 3}, 0}),
          float_sample("second", {{5, 3}}, SplitAttrs{0, {2, 3}, 1}),
          float_sample("last_axis", {{2, 6}}, SplitAttrs{-1, {1, 2, 3}, 2}),
          float_sample("middle", {{2, 4, 3}}, SplitAttrs{1, {1, 2, 1}, 1}),
          float_sample("whole", {{3}}, SplitAttrs{0, {3}, 0})};
}

std::vector<OpSample> concat_samples() {
  return {float_sample("rows", {{2, 3}, {4, 3}}, ConcatAttrs{0}),
          float_sample("last_axis", {{2, 1}, {2, 3}, {2, 2}}, ConcatAttrs{-1}),
          float_sample("single", {{3, 2}}, ConcatAttrs{1}),
          float_sample("middle", {{2, 1, 3}, {2, 2, 3}}, ConcatAttrs{1}),
          float_sample("vectors", {{2}, {1}, {3}}, ConcatAttrs{0})};
}

std::vector<OpSample> pad_samples() {
  return {float_sample("both", {{3, 4}}, PadAttrs{{1, 0}, {2, 1}, 0.0}),
          float_sample("leading_only", {{2, 3, 2}}, PadAttrs{{1}, {0}, 0.5}),
          float_sample("vector", {{4}}, PadAttrs{{2}, {3}, -1.0}),
          float_sample("batch", {{2, 2, 3}}, PadAttrs{{0, 1, 1}, {0, 0, 2}, 0.0})};
}

}  // namespace

void register_shape_slice_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "slice",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        SliceAttrs s = resolve_slice("slice", in, a.as<SliceAttrs>());
        TensorType out = in[0];
        out.shape[s.axis] = slice_length(s);
        return out;
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            auto types = types_of(in);
            SliceAttrs s = resolved_slice(n, types);
            auto strides = contiguous_strides(in[0]->shape);
            const int64_t base = s.start * strides[s.axis];
            strides[s.axis] *= s.step;
            return gather_strided(n, *in[0], std::move(strides), base);
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            auto types = types_of(in);
            SliceAttrs s = resolved_slice(n, types);
            const int64_t size = in[0].shape()[s.axis];
            if (s.step == 1) {
              return std::vector<Tensor>{pad(cot, pad_axis(s.axis, s.start, size - s.stop))};
            }
            return std::vector<Tensor>{
                cot.graph().apply("unslice", UnsliceAttrs{s.axis, size, s.start, s.step}, {cot})};
          },
      .samples = slice_samples,
      .summary = "x[start:stop:step] along one axis (Python bounds, positive step)",
  });
  r.add(OpDef{
      .name = "unslice",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        return infer_unslice(in, a.as<UnsliceAttrs>());
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const auto& a = n.attrs.as<UnsliceAttrs>();
            const int axis = normalize_axis(a.axis, in[0]->rank(), "unslice");
            Array out(n.type.shape, n.type.dtype);
            auto strides = contiguous_strides(out.shape);
            const int64_t base = a.start * strides[axis];
            strides[axis] *= a.step;
            scatter_strided(*in[0], out, std::move(strides), base);
            return out;
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            const auto& a = n.attrs.as<UnsliceAttrs>();
            const int axis = normalize_axis(a.axis, in[0].rank(), "unslice");
            const int64_t len = in[0].shape()[axis];
            return std::vector<Tensor>{
                slice(cot, axis, a.start, a.start + (len - 1) * a.step + 1, a.step)};
          },
      .samples = unslice_samples,
      .summary = "places x at every step-th position of a zero axis (adjoint of a strided slice)",
      .internal = true,
  });
  r.add(OpDef{
      .name = "split",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        SplitPiece p = resolve_split(in, a.as<SplitAttrs>());
        TensorType out = in[0];
        out.shape[p.axis] = p.size;
        return out;
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            auto types = types_of(in);
            SplitPiece p = resolve_split(types, n.attrs.as<SplitAttrs>());
            Array out(n.type.shape, n.type.dtype);
            copy_axis_block(*in[0], p.offset, out, 0, p.size, static_cast<int>(p.axis));
            return out;
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            auto types = types_of(in);
            SplitPiece p = resolve_split(types, n.attrs.as<SplitAttrs>());
            return std::vector<Tensor>{
                pad(cot, pad_axis(p.axis, p.offset, p.total - p.offset - p.size))};
          },
      .decompose =
          [](const Node& n, std::span<const Tensor> in) {
            auto types = types_of(in);
            SplitPiece p = resolve_split(types, n.attrs.as<SplitAttrs>());
            return slice(in[0], p.axis, p.offset, p.offset + p.size);
          },
      .samples = split_samples,
      .summary = "piece `index` of x cut along an axis into consecutive sizes (a slice)",
  });
  r.add(OpDef{
      .name = "concat",
      .arity = -1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        return infer_concat(in, a.as<ConcatAttrs>().axis);
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            const int axis =
                normalize_axis(n.attrs.as<ConcatAttrs>().axis, n.type.rank(), "concat");
            Array out(n.type.shape, n.type.dtype);
            int64_t at = 0;
            for (const Array* x : in) {
              copy_axis_block(*x, 0, out, at, x->shape[axis], axis);
              at += x->shape[axis];
            }
            return out;
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor out, Tensor cot) {
            const int axis = normalize_axis(n.attrs.as<ConcatAttrs>().axis, out.rank(), "concat");
            std::vector<Tensor> grads;
            int64_t at = 0;
            for (const Tensor& x : in) {
              const int64_t len = x.shape()[axis];
              grads.push_back(in.size() == 1 ? cot : slice(cot, axis, at, at + len));
              at += len;
            }
            return grads;
          },
      .samples = concat_samples,
      .summary = "joins operands along an existing axis",
  });
  r.add(OpDef{
      .name = "pad",
      .arity = 1,
      .archetype = Archetype::view,
      .infer = [](const Attrs& a, std::span<const TensorType> in) -> TensorType {
        PadAttrs p = resolve_pad("pad", in, a.as<PadAttrs>());
        TensorType out = in[0];
        for (size_t i = 0; i < out.shape.size(); ++i) {
          if (__builtin_add_overflow(out.shape[i], p.before[i], &out.shape[i]) ||
              __builtin_add_overflow(out.shape[i], p.after[i], &out.shape[i])) {
            shape_fail("pad", in, "padded sizes that fit int64 (axis " + std::to_string(i) + ")");
          }
        }
        return out;
      },
      .eval =
          [](const Node& n, std::span<const Array* const> in) {
            auto types = types_of(in);
            PadAttrs p = resolve_pad("pad", types, n.attrs.as<PadAttrs>());
            Array out =
                Array::full(n.type.shape, round_to_dtype(p.value, n.type.dtype), n.type.dtype);
            auto strides = contiguous_strides(out.shape);
            int64_t base = 0;
            for (size_t i = 0; i < strides.size(); ++i) base += p.before[i] * strides[i];
            scatter_strided(*in[0], out, std::move(strides), base);
            return out;
          },
      .vjp =
          [](const Node& n, std::span<const Tensor> in, Tensor, Tensor cot) {
            auto types = types_of(in);
            PadAttrs p = resolve_pad("pad", types, n.attrs.as<PadAttrs>());
            Tensor g = cot;
            for (size_t i = 0; i < p.before.size(); ++i) {
              if (p.before[i] == 0 && p.after[i] == 0) continue;
              g = slice(g, static_cast<int64_t>(i), p.before[i], p.before[i] + in[0].shape()[i]);
            }
            return std::vector<Tensor>{g};
          },
      .samples = pad_samples,
      .summary = "surrounds each axis with (before, after) elements of a constant value",
  });
}

}  // namespace ops::shape_detail

using namespace ops::shape_detail;

Tensor slice(Tensor x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  TensorType t = x.type();
  SliceAttrs s = resolve_slice("slice", {&t, 1}, SliceAttrs{axis, start, stop, step});
  if (slice_length(s) == t.shape[s.axis]) return x;
  return x.graph().apply("slice", s, {x});
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw Error("concat: expects at least one input");
  if (xs.size() == 1) {
    TensorType t = xs[0].type();
    infer_concat({&t, 1}, axis);  // still reject a bad axis
    return xs[0];
  }
  std::vector<TensorType> types = types_of(xs);
  const int64_t a = axis_in("concat", types, axis, types[0].rank());
  return xs[0].graph().apply("concat", ConcatAttrs{a}, xs);
}

std::vector<Tensor> split(Tensor x, const std::vector<int64_t>& sizes, int64_t axis) {
  TensorType t = x.type();
  SplitAttrs a{axis, sizes, 0};
  a.axis = resolve_split({&t, 1}, a).axis;
  if (sizes.size() == 1) return {x};
  std::vector<Tensor> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    a.index = static_cast<int64_t>(i);
    out.push_back(x.graph().apply("split", a, {x}));
  }
  return out;
}

Tensor pad(Tensor x, const std::vector<std::pair<int64_t, int64_t>>& pads, double value) {
  TensorType t = x.type();
  PadAttrs raw{{}, {}, value};
  for (const auto& [b, e] : pads) {
    raw.before.push_back(b);
    raw.after.push_back(e);
  }
  PadAttrs p = resolve_pad("pad", {&t, 1}, raw);
  bool any = false;
  for (size_t i = 0; i < p.before.size(); ++i) any = any || p.before[i] != 0 || p.after[i] != 0;
  if (!any) return x;
  return x.graph().apply("pad", std::move(p), {x});
}

}  // namespace mn
