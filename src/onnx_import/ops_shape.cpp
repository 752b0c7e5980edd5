// ONNX ops that move data or make it from shapes: Reshape, Transpose, Slice, Gather, Concat,
// Split, Pad, Expand, Tile, Shape, Constant, ConstantOfShape, Range, Trilu, OneHot, ...
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

Array ints_array(const std::vector<int64_t>& v) {
  Array a({static_cast<int64_t>(v.size())}, DType::i32);
  for (size_t i = 0; i < v.size(); ++i) a.data[i] = static_cast<double>(v[i]);
  return a;
}

// ---- host forms for known values, which may be empty (a shape's empty prefix) ----

// The same elements in a new shape (Reshape, Squeeze, Unsqueeze of a known value).
void out_known_reshaped(NodeContext& c, size_t input, Shape shape) {
  Array a = c.known(input, "input");
  if (mn::numel(shape) != a.numel()) {
    c.fail("cannot give " + std::to_string(a.numel()) + " elements the shape " + shape_str(shape));
  }
  a.shape = std::move(shape);
  c.out_known(0, std::move(a), c.type(input));
}

// out[..., i, ...] = a[..., idx[i], ...] along `axis`.
Array host_take(const Array& a, int axis, const std::vector<int64_t>& idx) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < a.rank(); ++i) {
    if (i < axis) outer *= a.shape[i];
    if (i > axis) inner *= a.shape[i];
  }
  const int64_t n = a.shape[axis];
  Shape s = a.shape;
  s[axis] = static_cast<int64_t>(idx.size());
  Array out(s, a.dtype);
  size_t k = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i : idx) {
      for (int64_t j = 0; j < inner; ++j) out.data[k++] = a.data[static_cast<size_t>((o * n + i) * inner + j)];
    }
  }
  return out;
}

Array host_concat(const std::vector<Array>& xs, int axis) {
  Shape s = xs[0].shape;
  s[axis] = 0;
  for (const Array& x : xs) s[axis] += x.shape[axis];
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  Array out(s, xs[0].dtype);
  size_t k = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (const Array& x : xs) {
      const int64_t block = outer == 0 ? 0 : x.numel() / outer;
      for (int64_t j = 0; j < block; ++j) out.data[k++] = x.data[static_cast<size_t>(o * block + j)];
    }
  }
  return out;
}

// The indices x[start:end:step] visits along an axis of n, with ONNX's clamping.
std::vector<int64_t> slice_indices(NodeContext& c, int64_t n, int64_t start, int64_t end, int64_t step) {
  if (step == 0) c.fail("a step of 0");
  auto clampi = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
  if (start < 0) start = start <= std::numeric_limits<int64_t>::min() / 2 ? -1 : start + n;
  if (end < 0) end = end <= std::numeric_limits<int64_t>::min() / 2 ? -1 : end + n;
  std::vector<int64_t> idx;
  if (step > 0) {
    start = clampi(start, 0, n);
    end = clampi(end, 0, n);
    for (int64_t i = start; i < end; i += step) idx.push_back(i);
  } else {
    start = clampi(start, -1, n - 1);
    end = clampi(end, -1, n - 1);
    for (int64_t i = start; i > end; i += step) idx.push_back(i);
  }
  return idx;
}

// Axes given as an attribute (older opsets) or as an optional input (newer ones).
std::optional<std::vector<int64_t>> axes_of(NodeContext& c, int64_t input_since, size_t input) {
  if (c.opset() >= input_since) {
    if (!c.has(input)) return std::nullopt;
    return c.known_ints(input, "axes");
  }
  return c.attr_ints_opt("axes");
}

// Reshape's target with 0 (copy) and -1 (inferred) resolved.
Shape reshape_target(NodeContext& c, const Shape& in, std::vector<int64_t> target, bool allow_zero) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allow_zero) {
      if (i >= in.size()) c.fail("shape entry 0 copies a dimension the input lacks");
      target[i] = in[i];
    }
    if (target[i] == -1) {
      if (infer >= 0) c.fail("more than one -1 in the shape");
      infer = static_cast<int>(i);
    } else if (target[i] < 0) {
      c.fail("negative dimension " + std::to_string(target[i]) + " in the shape");
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0) {
    const int64_t n = mn::numel(in);
    if (known == 0 || n % known != 0) c.fail("cannot infer the -1 of the shape from " + shape_str(in));
    target[static_cast<size_t>(infer)] = n / known;
  }
  return Shape(target.begin(), target.end());
}

void convert_reshape(NodeContext& c) {
  std::vector<int64_t> target = c.opset() >= 5 ? c.known_ints(1, "shape") : c.attr_ints("shape");
  Shape s = reshape_target(c, c.shape(0), target, c.attr_int("allowzero", 0) != 0);
  if (c.folding()) return out_known_reshaped(c, 0, s);
  c.out(0, reshape(c.in(0), s), c.type(0));
}

void convert_flatten(NodeContext& c) {
  Tensor x = c.in(0);
  const int64_t a = c.attr_int("axis", 1);
  const int axis = a == x.rank() ? x.rank() : c.axis(a, x.rank());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(i);
  c.out(0, reshape(x, {outer, inner}), c.type(0));
}

void convert_transpose(NodeContext& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> perm = c.attr_ints("perm");
  if (perm.empty()) {
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  c.out(0, permute(x, perm), c.type(0));
}

void convert_squeeze(NodeContext& c) {
  const Shape& in = c.shape(0);
  auto axes = axes_of(c, 13, 1);
  std::vector<bool> drop(in.size(), false);
  if (axes && !axes->empty()) {
    for (int64_t a : *axes) {
      const int ax = c.axis(a, c.rank(0));
      if (in[ax] != 1) c.fail("axis " + std::to_string(a) + " has size " + std::to_string(in[ax]) + ", not 1");
      drop[ax] = true;
    }
  } else {  // no axes: every axis of size 1
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
  }
  Shape s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!drop[i]) s.push_back(in[i]);
  }
  if (c.folding()) return out_known_reshaped(c, 0, s);
  c.out(0, reshape(c.in(0), s), c.type(0));
}

void convert_unsqueeze(NodeContext& c) {
  const Shape& in = c.shape(0);
  auto axes = axes_of(c, 13, 1);
  if (!axes || axes->empty()) c.fail("axes are missing");
  const int out_rank = c.rank(0) + static_cast<int>(axes->size());
  std::vector<int> norm;
  for (int64_t a : *axes) norm.push_back(c.axis(a, out_rank));
  std::sort(norm.begin(), norm.end());
  if (std::adjacent_find(norm.begin(), norm.end()) != norm.end()) c.fail("repeated axes");
  Shape s;
  size_t k = 0;
  int src = 0;
  for (int i = 0; i < out_rank; ++i) {
    if (k < norm.size() && norm[k] == i) {
      s.push_back(1);
      ++k;
    } else {
      s.push_back(in[static_cast<size_t>(src++)]);
    }
  }
  if (c.folding()) return out_known_reshaped(c, 0, s);
  c.out(0, reshape(c.in(0), s), c.type(0));
}

void convert_concat(NodeContext& c) {
  if (c.folding()) {
    std::vector<Array> xs;
    for (size_t i = 0; i < c.input_count(); ++i) {
      if (c.has(i)) xs.push_back(c.known(i, "input"));
    }
    if (xs.empty()) c.fail("needs at least one input");
    const int axis = c.axis(c.attr_int("axis", 0), xs[0].rank());
    for (const Array& x : xs) {
      Shape a = x.shape, b = xs[0].shape;
      if (a.size() != b.size()) c.fail("operands of different ranks");
      a[axis] = b[axis] = 0;
      if (a != b) c.fail("operands differ outside the axis: " + shape_str(x.shape) + " and " + shape_str(xs[0].shape));
    }
    c.out_known(0, host_concat(xs, axis), c.type(0));
    return;
  }
  std::vector<Tensor> xs;
  for (size_t i = 0; i < c.input_count(); ++i) {
    if (!c.has(i)) continue;
    if (c.type(i) != c.type(0)) c.fail("operands of different types");
    xs.push_back(c.in(i));
  }
  if (xs.empty()) c.fail("needs at least one input");
  const int axis = c.axis(c.attr_int("axis", 0), xs[0].rank());
  // ONNX allows empty operands ([0] shape arithmetic); they add nothing.
  std::vector<Tensor> kept;
  for (const Tensor& x : xs) {
    if (x.dim(axis) > 0) kept.push_back(x);
  }
  if (kept.empty()) kept.push_back(xs[0]);
  c.out(0, kept.size() == 1 ? kept[0] : concat(kept, axis), c.type(0));
}

void convert_split(NodeContext& c) {
  Tensor x = c.in(0);
  const int axis = c.axis(c.attr_int("axis", 0), x.rank());
  std::vector<int64_t> sizes =
      c.opset() >= 13 ? (c.has(1) ? c.known_ints(1, "split") : std::vector<int64_t>{})
                      : c.attr_ints("split");
  const int64_t n = static_cast<int64_t>(c.output_count());
  const int64_t d = x.dim(axis);
  if (sizes.empty() && c.has_attr("num_outputs")) {  // opset 18: equal parts, the last smaller
    if (c.attr_int("num_outputs", 0) != n) c.fail("num_outputs differs from the number of outputs");
    const int64_t chunk = (d + n - 1) / n;
    if (chunk * (n - 1) >= d) c.fail("axis of size " + std::to_string(d) + " cannot make " + std::to_string(n) + " parts");
    sizes.assign(static_cast<size_t>(n - 1), chunk);
    sizes.push_back(d - chunk * (n - 1));
  } else if (sizes.empty()) {
    if (d % n != 0) c.fail("axis of size " + std::to_string(d) + " does not split into " + std::to_string(n) + " equal parts");
    sizes.assign(static_cast<size_t>(n), d / n);
  }
  if (static_cast<int64_t>(sizes.size()) != n) c.fail("'split' has " + std::to_string(sizes.size()) + " sizes for " + std::to_string(n) + " outputs");
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    c.out(i, slice(x, axis, start, start + sizes[i]), c.type(0));
    start += sizes[i];
  }
}

// x[start:end:step] along one axis, any step (negative steps gather the elements in order).
Tensor slice_axis(NodeContext& c, Tensor x, int axis, const std::vector<int64_t>& idx) {
  if (idx.empty()) c.unsupported("an empty slice: zero-sized tensors are not supported");
  const int64_t step = idx.size() > 1 ? idx[1] - idx[0] : 1;
  if (step > 0) return slice(x, axis, idx.front(), idx.back() + 1, step);
  return take(x, c.graph().constant(ints_array(idx)), axis);
}

void convert_slice(NodeContext& c) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  } else {
    starts = c.known_ints(1, "starts");
    ends = c.known_ints(2, "ends");
    if (c.has(3)) axes = c.known_ints(3, "axes");
    if (c.has(4)) steps = c.known_ints(4, "steps");
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    c.fail("starts, ends, axes and steps differ in length");
  }
  if (c.folding()) {
    Array x = c.known(0, "data");
    for (size_t i = 0; i < starts.size(); ++i) {
      const int axis = c.axis(axes[i], x.rank());
      x = host_take(x, axis, slice_indices(c, x.shape[axis], starts[i], ends[i], steps[i]));
    }
    c.out_known(0, std::move(x), c.type(0));
    return;
  }
  Tensor x = c.in(0);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int axis = c.axis(axes[i], x.rank());
    x = slice_axis(c, x, axis, slice_indices(c, x.dim(axis), starts[i], ends[i], steps[i]));
  }
  c.out(0, x, c.type(0));
}

void convert_gather(NodeContext& c) {
  Tensor x = c.in(0);
  const int axis = c.axis(c.attr_int("axis", 0), x.rank());
  if (!is_integer(c.type(1))) c.fail("indices must be integers");
  c.out(0, take(x, wrapped_indices(c, 1, x.dim(axis)), axis), c.type(0));
}

void convert_expand(NodeContext& c) {
  Tensor x = c.in(0);
  const std::vector<int64_t> shape = c.known_ints(1, "shape");
  const Shape out = broadcast_shapes(x.shape(), shape, c.where());
  c.out(0, out == x.shape() ? x : broadcast_to(x, out), c.type(0));
}

void convert_tile(NodeContext& c) {
  Tensor x = c.in(0);
  const std::vector<int64_t> reps = c.known_ints(1, "repeats");
  if (static_cast<int>(reps.size()) != x.rank()) c.fail("repeats must have one entry per axis");
  for (int a = 0; a < x.rank(); ++a) {
    if (reps[a] < 0) c.fail("a negative repeat count");
    if (reps[a] == 1) continue;
    if (reps[a] == 0) {
      x = slice(x, a, 0, 0);
      continue;
    }
    // Tile = broadcast along a new axis before `a`, then merge the two.
    Shape s = x.shape();
    Shape b = s;
    b.insert(b.begin() + a, reps[a]);
    Shape u = s;
    u.insert(u.begin() + a, 1);
    Shape merged = s;
    merged[a] *= reps[a];
    x = reshape(broadcast_to(reshape(x, u), b), merged);
  }
  c.out(0, x, c.type(0));
}

void convert_shape(NodeContext& c) {
  const Shape& s = c.shape(0);
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t start = c.attr_int("start", 0);
  int64_t end = c.attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> dims(s.begin() + start, s.begin() + std::max(start, end));
  c.out_known(0, ints_array(dims), ElemType::i64);
}

void convert_size(NodeContext& c) {
  c.out_known(0, Array::scalar(static_cast<double>(mn::numel(c.shape(0))), DType::i32),
              ElemType::i64);
}

// A Constant node's value: a tensor, or one of the scalar/list forms of opset 12.
void convert_constant(NodeContext& c) {
  if (const auto* t = c.attr_tensor("value")) {
    RawTensor raw = tensor_from_proto(*t, {}, c.where() + " value");
    ElemType type = raw.type;
    c.out_known(0, host_array(raw), type);
    return;
  }
  if (c.has_attr("value_float")) {
    c.out_known(0, Array::scalar(c.attr_float("value_float", 0)), ElemType::f32);
  } else if (c.has_attr("value_floats")) {
    std::vector<float> f = c.attr_floats("value_floats");
    c.out_known(0, Array({static_cast<int64_t>(f.size())}, DType::f32, {f.begin(), f.end()}),
                ElemType::f32);
  } else if (c.has_attr("value_int")) {
    c.out_known(0, Array::scalar(static_cast<double>(c.attr_int("value_int", 0)), DType::i32),
                ElemType::i64);
  } else if (c.has_attr("value_ints")) {
    c.out_known(0, ints_array(c.attr_ints("value_ints")), ElemType::i64);
  } else if (c.has_attr("sparse_value")) {
    c.unsupported("sparse constants");
  } else {
    c.unsupported("a Constant without a numeric value (strings are not supported)");
  }
}

void convert_constant_of_shape(NodeContext& c) {
  const std::vector<int64_t> shape = c.known_ints(0, "shape");
  ElemType type = ElemType::f32;
  double v = 0;
  if (const auto* t = c.attr_tensor("value")) {
    RawTensor raw = tensor_from_proto(*t, {}, c.where() + " value");
    if (raw.numel() != 1) c.fail("'value' must hold one element");
    type = raw.type;
    v = raw.value(0);
  }
  for (int64_t d : shape) {
    if (d < 0) c.fail("a negative dimension in the shape");
  }
  Array a = Array::full(Shape(shape.begin(), shape.end()), v, DType::f32);
  if (a.numel() <= (int64_t{1} << 20)) {
    c.out_known(0, std::move(a), type);
  } else {  // large: one scalar broadcast on the device, not a constant in memory
    Tensor s = c.graph().scalar(v, graph_dtype_of(type, c.where()));
    c.out(0, broadcast_to(s, Shape(shape.begin(), shape.end())), type);
  }
}

void convert_range(NodeContext& c) {
  const double start = c.known_scalar(0, "start");
  const double limit = c.known_scalar(1, "limit");
  const double delta = c.known_scalar(2, "delta");
  if (delta == 0) c.fail("delta is 0");
  const double count = std::max(std::ceil((limit - start) / delta), 0.0);
  c.host_limit(static_cast<int64_t>(std::min(count, 1e18)), "Range");
  const int64_t n = static_cast<int64_t>(count);
  Array a({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) a.data[static_cast<size_t>(i)] = start + static_cast<double>(i) * delta;
  c.out_known(0, std::move(a), c.type(0));
}

// CumSum along an axis as a product with a triangular 0/1 matrix (exclusive and reverse are
// its other triangles); integers go through f32, exact below 2^24.
void convert_cumsum(NodeContext& c) {
  Tensor x = c.in_float(0);
  const int axis = c.axis(static_cast<int64_t>(c.known_scalar(1, "axis")), x.rank());
  const bool exclusive = c.attr_int("exclusive", 0) != 0;
  const bool reverse = c.attr_int("reverse", 0) != 0;
  const int64_t n = x.dim(axis);
  c.host_limit(n * n, "CumSum's triangular matrix");
  Array m({n, n}, x.dtype());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      const bool in = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
      m.data[static_cast<size_t>(j * n + i)] = in ? 1.0 : 0.0;
    }
  }
  std::vector<int64_t> perm;
  for (int a = 0; a < x.rank(); ++a) {
    if (a != axis) perm.push_back(a);
  }
  perm.push_back(axis);
  std::vector<int64_t> back(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  Tensor y = matmul(permute(x, perm), c.graph().constant(std::move(m)));
  c.out(0, permute(y, back), c.type(0));
}

// Pad: constant (negative pads crop), reflect, edge or wrap.
void convert_pad(NodeContext& c) {
  Tensor x = c.in(0);
  const std::string mode = c.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    c.fail("unknown mode '" + mode + "'");
  }
  std::vector<int64_t> pads;
  double value = 0;
  if (c.opset() < 11) {
    pads = c.attr_ints("pads");
    value = c.attr_float("value", 0.0);
  } else {
    pads = c.known_ints(1, "pads");
    if (c.has(2)) value = c.known_scalar(2, "constant_value");
  }
  std::vector<int64_t> axes;
  if (c.has(3)) {
    for (int64_t a : c.known_ints(3, "axes")) axes.push_back(c.axis(a, x.rank()));
  } else {
    for (int a = 0; a < x.rank(); ++a) axes.push_back(a);
  }
  const size_t n = axes.size();
  if (pads.size() != 2 * n) c.fail("pads must hold 2 entries per axis");
  std::vector<std::pair<int64_t, int64_t>> p(static_cast<size_t>(x.rank()), {0, 0});
  for (size_t i = 0; i < n; ++i) {
    int64_t before = pads[i], after = pads[i + n];
    const int a = static_cast<int>(axes[i]);
    if (before < 0 || after < 0) {
      x = slice(x, a, std::max<int64_t>(-before, 0), x.dim(a) - std::max<int64_t>(-after, 0));
    }
    p[static_cast<size_t>(a)] = {std::max<int64_t>(before, 0), std::max<int64_t>(after, 0)};
  }
  const bool any = std::any_of(p.begin(), p.end(), [](auto q) { return q.first || q.second; });
  if (any && mode != "constant") {
    // reflect / edge / wrap: each padded axis gathers the source index of every position.
    for (int a = 0; a < x.rank(); ++a) {
      const auto [before, after] = p[static_cast<size_t>(a)];
      if (before == 0 && after == 0) continue;
      const int64_t n = x.dim(a);
      if (mode == "reflect" && (before >= n || after >= n)) c.fail("reflect pads must be smaller than the axis");
      std::vector<int64_t> idx;
      for (int64_t i = -before; i < n + after; ++i) {
        if (mode == "edge") idx.push_back(std::min(std::max<int64_t>(i, 0), n - 1));
        else if (mode == "wrap") idx.push_back(((i % n) + n) % n);
        else idx.push_back(i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i);
      }
      x = take(x, c.graph().constant(ints_array(idx)), a);
    }
    c.out(0, x, c.type(0));
    return;
  }
  c.out(0, any ? pad(x, p, value) : x, c.type(0));
}

// DepthToSpace / SpaceToDepth as reshape + permute, on [N, C, H, W].
int64_t block_size(NodeContext& c, const Tensor& x) {
  if (x.rank() != 4) c.unsupported("inputs of rank other than 4");
  const int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0) c.fail("blocksize must be positive");
  return b;
}

void convert_depth_to_space(NodeContext& c) {
  Tensor x = c.in(0);
  const int64_t b = block_size(c, x);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (C % (b * b) != 0) c.fail("channels not divisible by blocksize^2");
  const bool crd = c.attr_string("mode", "DCR") == "CRD";
  Tensor y = crd ? permute(reshape(x, {N, C / (b * b), b, b, H, W}), {0, 1, 4, 2, 5, 3})
                 : permute(reshape(x, {N, b, b, C / (b * b), H, W}), {0, 3, 4, 1, 5, 2});
  c.out(0, reshape(y, {N, C / (b * b), H * b, W * b}), c.type(0));
}

void convert_space_to_depth(NodeContext& c) {
  Tensor x = c.in(0);
  const int64_t b = block_size(c, x);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (H % b != 0 || W % b != 0) c.fail("spatial size not divisible by blocksize");
  Tensor y = permute(reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
  c.out(0, reshape(y, {N, C * b * b, H / b, W / b}), c.type(0));
}

// Trilu: the upper (or lower) triangle from diagonal k of the last two axes.
void convert_trilu(NodeContext& c) {
  Tensor x = c.in(0);
  if (x.rank() < 2) c.fail("input must have rank >= 2");
  const int64_t k = c.has(1) ? static_cast<int64_t>(c.known_scalar(1, "k")) : 0;
  const bool upper = c.attr_int("upper", 1) != 0;
  // The mask from a row and a column of positions: column - row >= k (upper) or <= k.
  const int64_t n = x.dim(-2), m = x.dim(-1);
  c.host_limit(n + m, "Trilu's positions");
  std::vector<int64_t> rows(static_cast<size_t>(n)), cols(static_cast<size_t>(m));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  std::iota(cols.begin(), cols.end(), int64_t{0});
  Graph& g = c.graph();
  Tensor offset = reshape(g.constant(ints_array(cols)), {1, m}) - reshape(g.constant(ints_array(rows)), {n, 1});
  Tensor kk = g.scalar(static_cast<double>(k), DType::i32);
  Tensor mask = upper ? ge(offset, kk) : le(offset, kk);
  c.out(0, where(mask, x, g.scalar(0, x.dtype())), c.type(0));
}

void convert_one_hot(NodeContext& c) {
  const int64_t depth = static_cast<int64_t>(c.known_scalar(1, "depth"));
  if (depth <= 0) c.fail("depth must be positive");
  Tensor idx = wrapped_indices(c, 0, depth);
  Tensor values = c.in(2);
  if (values.numel() != 2) c.fail("values must hold [off, on]");
  Tensor off = reshape(slice(values, 0, 0, 1), {});
  Tensor on = reshape(slice(values, 0, 1, 2), {});
  Tensor oh = one_hot(idx, depth, is_float(values.dtype()) ? values.dtype() : DType::f32);
  if (!is_float(values.dtype())) oh = cast(oh, values.dtype());
  Tensor y = off + oh * (on - off);
  c.out(0, last_axis_to(y, c.axis(c.attr_int("axis", -1), y.rank())), c.type(2));
}

void convert_eye_like(NodeContext& c) {
  const Shape& s = c.shape(0);
  if (s.size() != 2) c.fail("input must be 2-D");
  const int64_t k = c.attr_int("k", 0);
  c.host_limit(s[0] * s[1], "EyeLike's matrix");
  ElemType type = c.type(0);
  if (auto dt = c.attr_int("dtype")) type = elem_type_of(static_cast<int>(*dt), c.where());
  Array a({s[0], s[1]}, DType::f32);
  for (int64_t i = 0; i < s[0]; ++i) {
    const int64_t j = i + k;
    if (j >= 0 && j < s[1]) a.data[static_cast<size_t>(i * s[1] + j)] = 1.0;
  }
  c.out_known(0, std::move(a), type);
}

// Inference: Dropout is the identity, its mask all true.
void convert_dropout(NodeContext& c) {
  // In training a ratio of 0 drops nothing: the output is the input, the mask all true.
  if (c.has(2) && c.known_scalar(2, "training_mode") != 0.0 &&
      !(c.has(1) && c.known_scalar(1, "ratio") == 0.0)) {
    c.unsupported("training_mode = true (dropout during training is the nn Dropout module's)");
  }
  if (c.opset() < 7 && c.attr_int("is_test", 0) == 0) c.unsupported("is_test = 0");
  Tensor x = c.in(0);
  c.out(0, x, c.type(0));
  if (c.wants(1)) c.out(1, broadcast_to(c.graph().scalar(1.0), x.shape()), ElemType::boolean);
}

// Compress: the slices along `axis` (of the flattened input without one) whose condition
// entry is true; the condition decides the output's shape, so it must be known.
void convert_compress(NodeContext& c) {
  Tensor x = c.in(0);
  const std::optional<int64_t> attr = c.attr_int("axis");
  if (!attr) x = reshape(x, {x.numel()});
  const int axis = attr ? c.axis(*attr, static_cast<int>(x.rank())) : 0;
  const Array& condition = c.known(1, "condition");
  if (condition.shape.size() != 1) c.fail("condition must be one-dimensional");
  std::vector<double> kept;
  for (size_t i = 0; i < condition.data.size(); ++i) {
    if (condition.data[i] == 0.0) continue;
    if (static_cast<int64_t>(i) >= x.dim(axis)) c.fail("condition is longer than the axis");
    kept.push_back(static_cast<double>(i));
  }
  if (kept.empty()) c.unsupported("a condition selecting nothing: zero-sized tensors are not supported");
  const auto n = static_cast<int64_t>(kept.size());
  c.out(0, take(x, c.graph().constant(Array({n}, DType::i32, std::move(kept))), axis), c.type(0));
}

// ReverseSequence: the first sequence_lens[b] steps of batch row b reversed along time_axis, the
// rest as they are; the lengths must be known (a gather with a host-computed index table).
void convert_reverse_sequence(NodeContext& c) {
  Tensor x = c.in(0);
  if (x.rank() < 2) c.fail("input must have at least two axes");
  const int time = c.axis(c.attr_int("time_axis", 0), static_cast<int>(x.rank()), "time_axis");
  const int batch = c.axis(c.attr_int("batch_axis", 1), static_cast<int>(x.rank()), "batch_axis");
  if ((time != 0 || batch != 1) && (time != 1 || batch != 0)) {
    c.fail("time_axis and batch_axis must be 0 and 1 in either order");
  }
  const std::vector<int64_t> lens = c.known_ints(1, "sequence_lens");
  const int64_t steps = x.dim(time), rows = x.dim(batch);
  if (static_cast<int64_t>(lens.size()) != rows) c.fail("sequence_lens must hold one length per batch row");
  c.host_limit(steps * rows, "the index table");
  // Flat [time, batch] offsets (time-major) of every output element's source.
  Shape rest = x.shape();
  rest.erase(rest.begin(), rest.begin() + 2);
  std::vector<double> source(static_cast<size_t>(steps * rows));
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    if (len < 0 || len > steps) c.fail("a sequence length outside [0, " + std::to_string(steps) + "]");
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t from = t < len ? len - 1 - t : t;
      source[static_cast<size_t>(t * rows + b)] = static_cast<double>(from * rows + b);
    }
  }
  Tensor tb = time == 0 ? x : permute(x, [&] {
    std::vector<int64_t> p{1, 0};
    for (int64_t a = 2; a < x.rank(); ++a) p.push_back(a);
    return p;
  }());
  Shape flat{steps * rows};
  flat.insert(flat.end(), rest.begin(), rest.end());
  Tensor y = take(reshape(tb, flat),
                  c.graph().constant(Array({steps * rows}, DType::i32, std::move(source))), 0);
  Shape back{steps, rows};
  back.insert(back.end(), rest.begin(), rest.end());
  y = reshape(y, back);
  if (time != 0) {
    std::vector<int64_t> p{1, 0};
    for (int64_t a = 2; a < x.rank(); ++a) p.push_back(a);
    y = permute(y, p);
  }
  c.out(0, y, c.type(0));
}

}  // namespace

// Indices with ONNX's negative entries counted from the end, as i32.
Tensor wrapped_indices(NodeContext& c, size_t i, int64_t n) {
  if (c.is_known(i) && c.value(i).source != Value::Source::input) {
    Array a = c.known(i, "indices");
    for (double& v : a.data) {
      if (v < -static_cast<double>(n) || v >= static_cast<double>(n)) {
        c.fail("index " + std::to_string(static_cast<int64_t>(v)) + " is out of range for an axis of " + std::to_string(n));
      }
      if (v < 0) v += static_cast<double>(n);
    }
    a.dtype = DType::i32;
    return c.graph().constant(std::move(a));
  }
  Tensor idx = c.in(i);
  if (idx.dtype() != DType::i32) idx = cast(idx, DType::i32);
  Tensor zero = c.graph().scalar(0, DType::i32);
  return where(lt(idx, zero), idx + c.graph().scalar(static_cast<double>(n), DType::i32), idx);
}

Tensor last_axis_to(Tensor y, int axis) {
  const int rank = y.rank();
  if (axis == rank - 1) return y;
  std::vector<int64_t> perm;
  for (int i = 0; i < rank; ++i) perm.push_back(i < axis ? i : i == axis ? rank - 1 : i - 1);
  return permute(y, perm);
}

void add_shape_converters(ConverterTable& t) {
  t.add("Reshape", convert_reshape);
  t.add("Flatten", convert_flatten);
  t.add("Transpose", convert_transpose);
  t.add("Squeeze", convert_squeeze);
  t.add("Unsqueeze", convert_unsqueeze);
  t.add("Concat", convert_concat);
  t.add("Split", convert_split);
  t.add("Slice", convert_slice);
  t.add("Gather", convert_gather);
  t.add("CumSum", convert_cumsum);
  t.add("Expand", convert_expand);
  t.add("Tile", convert_tile);
  t.add("Shape", convert_shape);
  t.add("Size", convert_size);
  t.add("Constant", convert_constant);
  t.add("ConstantOfShape", convert_constant_of_shape);
  t.add("Range", convert_range);
  t.add("Pad", convert_pad);
  t.add("DepthToSpace", convert_depth_to_space);
  t.add("SpaceToDepth", convert_space_to_depth);
  t.add("Trilu", convert_trilu);
  t.add("OneHot", convert_one_hot);
  t.add("EyeLike", convert_eye_like);
  t.add("Dropout", convert_dropout);
  t.add("Compress", convert_compress);
  t.add("ReverseSequence", convert_reverse_sequence);
}

}  // namespace mn::onnx
