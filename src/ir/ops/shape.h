#pragma once
// Attributes of the shape family (reshape, permute, broadcast, slicing, concatenation, padding,
// indexing) and the resolved forms that inference, evaluation and vjps share.
//
// The public functions store canonical attributes (axes normalized, -1 resolved, slice bounds
// clamped), so equal ops hash equal; inference still accepts the raw forms (negative axes, -1,
// Python slice bounds) for graphs built with Graph::apply directly.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <meganeura/attrs.h>
#include <meganeura/dtype.h>

namespace mn {

class OpRegistry;
struct OpSample;

struct ReshapeAttrs {
  Shape shape;  // at most one -1, inferred from the element count
  auto fields() const { return std::tie(shape); }
  static constexpr std::array<const char*, 1> names{"shape"};
};

// out.shape[d] = x.shape[perm[d]].
struct PermuteAttrs {
  std::vector<int64_t> perm;
  auto fields() const { return std::tie(perm); }
  static constexpr std::array<const char*, 1> names{"perm"};
};

// Swaps two axes; a composite of permute (kept as its own op for readable graphs).
struct TransposeAttrs {
  int64_t axis0 = -2;
  int64_t axis1 = -1;
  auto fields() const { return std::tie(axis0, axis1); }
  static constexpr std::array<const char*, 2> names{"axis0", "axis1"};
};

struct BroadcastToAttrs {
  Shape shape;
  auto fields() const { return std::tie(shape); }
  static constexpr std::array<const char*, 1> names{"shape"};
};

struct SqueezeAttrs {
  std::vector<int64_t> axes;  // empty: every size-1 axis
  auto fields() const { return std::tie(axes); }
  static constexpr std::array<const char*, 1> names{"axes"};
};

// A negative axis counts in the output rank (numpy's expand_dims): -1 appends.
struct UnsqueezeAttrs {
  int64_t axis = 0;
  auto fields() const { return std::tie(axis); }
  static constexpr std::array<const char*, 1> names{"axis"};
};

// Python slicing x[start:stop:step] along one axis, step > 0.
struct SliceAttrs {
  int64_t axis = 0;
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  auto fields() const { return std::tie(axis, start, stop, step); }
  static constexpr std::array<const char*, 4> names{"axis", "start", "stop", "step"};
};

// Internal adjoint of a strided slice: out has `size` entries along `axis`, zero except
// out[start + i * step] = x[i]. (Unit-step slices use pad instead.)
struct UnsliceAttrs {
  int64_t axis = 0;
  int64_t size = 0;
  int64_t start = 0;
  int64_t step = 1;
  auto fields() const { return std::tie(axis, size, start, step); }
  static constexpr std::array<const char*, 4> names{"axis", "size", "start", "step"};
};

struct ConcatAttrs {
  int64_t axis = 0;
  auto fields() const { return std::tie(axis); }
  static constexpr std::array<const char*, 1> names{"axis"};
};

// Piece `index` of x split along `axis` into consecutive pieces of the given sizes.
struct SplitAttrs {
  int64_t axis = 0;
  std::vector<int64_t> sizes;
  int64_t index = 0;
  auto fields() const { return std::tie(axis, sizes, index); }
  static constexpr std::array<const char*, 3> names{"axis", "sizes", "index"};
};

// before[i]/after[i] pad axis i; shorter lists pad the leading axes only.
struct PadAttrs {
  std::vector<int64_t> before;
  std::vector<int64_t> after;
  double value = 0.0;
  auto fields() const { return std::tie(before, after, value); }
  static constexpr std::array<const char*, 3> names{"before", "after", "value"};
};

// take(x, indices): out.shape = x.shape[:axis] + indices.shape + x.shape[axis+1:]. Indices must
// lie in [0, x.shape[axis]); the reference throws mn::Error otherwise (no negative wrapping).
struct TakeAttrs {
  int64_t axis = 0;
  auto fields() const { return std::tie(axis); }
  static constexpr std::array<const char*, 1> names{"axis"};
};

// scatter_add(x, indices, updates): updates.shape = x.shape[:axis] + indices.shape +
// x.shape[axis+1:]; duplicate indices accumulate.
struct ScatterAddAttrs {
  int64_t axis = 0;
  auto fields() const { return std::tie(axis); }
  static constexpr std::array<const char*, 1> names{"axis"};
};

// one_hot(indices): out[..., d] = indices[...] == d. An index outside [0, depth) is an error in
// the reference (as PyTorch's one_hot), not an all-zero row.
struct OneHotAttrs {
  int64_t depth = 0;
  DType dtype = DType::f32;
  auto fields() const { return std::tie(depth, dtype); }
  static constexpr std::array<const char*, 2> names{"depth", "dtype"};
};

namespace ops::shape_detail {

// Resolved attribute forms. Each takes the op name and input types so that a bad attribute
// is reported by shape_fail (op, input types, what was expected).
int64_t axis_in(std::string_view op, std::span<const TensorType> in, int64_t axis, int rank);
Shape resolve_reshape(std::string_view op, std::span<const TensorType> in, const Shape& target);
std::vector<int64_t> resolve_perm(std::string_view op, std::span<const TensorType> in,
                                  const std::vector<int64_t>& perm);
std::vector<int64_t> resolve_squeeze(std::string_view op, std::span<const TensorType> in,
                                     const std::vector<int64_t>& axes);
int64_t resolve_unsqueeze(std::string_view op, std::span<const TensorType> in, int64_t axis);
// Clamped [start, stop) with the given step and the resulting length (at least 1).
SliceAttrs resolve_slice(std::string_view op, std::span<const TensorType> in, const SliceAttrs& a);
int64_t slice_length(const SliceAttrs& resolved);
// Full-rank pads.
PadAttrs resolve_pad(std::string_view op, std::span<const TensorType> in, const PadAttrs& a);

// Element counts before, along and after `axis`.
struct AxisSplit {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};
AxisSplit split_at(std::span<const int64_t> shape, int axis);

// A sample whose operands are all f32, filled from [-1, 1].
OpSample float_sample(std::string label, std::vector<Shape> shapes, Attrs attrs);

void register_shape_view_ops(OpRegistry& r);   // shape.cpp
void register_shape_slice_ops(OpRegistry& r);  // shape_slice.cpp: slice, split, concat, pad
void register_shape_index_ops(OpRegistry& r);  // shape_index.cpp: take, scatter_add, one_hot

}  // namespace ops::shape_detail

}  // namespace mn
