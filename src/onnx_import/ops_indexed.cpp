// ONNX's indexed reads and writes: GatherElements, GatherND, ScatterElements, ScatterND. Each is
// one take or scatter_add over a flattened view, at offsets made of host-computed bases (the
// coordinates the indices do not give) plus the indices times their strides.
#include <onnx/onnx_pb.h>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

// For every element of `shape`, sum over axes a in `axes` of its coordinate times stride[a].
Array coordinate_offsets(const Shape& shape, const std::vector<int>& axes,
                         const std::vector<int64_t>& stride) {
  Array out(shape, DType::i32);
  std::vector<int64_t> coord(shape.size(), 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t offset = 0;
    for (int a : axes) offset += coord[static_cast<size_t>(a)] * stride[static_cast<size_t>(a)];
    out.data[static_cast<size_t>(i)] = static_cast<double>(offset);
    for (int a = static_cast<int>(shape.size()) - 1; a >= 0; --a) {
      if (++coord[static_cast<size_t>(a)] < shape[static_cast<size_t>(a)]) break;
      coord[static_cast<size_t>(a)] = 0;
    }
  }
  return out;
}

void check_elements(NodeContext& c, const Tensor& x) {
  if (x.numel() > 2147483647) c.unsupported("data of more than 2^31 elements");
}

// GatherElements / ScatterElements: the flat offset of every index into x.
Tensor element_offsets(NodeContext& c, const Tensor& x, int axis) {
  if (!is_integer(c.type(1))) c.fail("indices must be integers");
  const Shape& is = c.shape(1);
  if (static_cast<int>(is.size()) != x.rank()) c.fail("indices must have the rank of data");
  std::vector<int> others;
  for (int a = 0; a < x.rank(); ++a) {
    if (a == axis) continue;
    if (is[static_cast<size_t>(a)] > x.dim(a)) c.fail("indices exceed data outside the axis");
    others.push_back(a);
  }
  check_elements(c, x);
  c.host_limit(mn::numel(is), "the offsets of the indices");
  const std::vector<int64_t> strides = contiguous_strides(x.shape());
  Tensor base = c.graph().constant(coordinate_offsets(is, others, strides));
  Tensor idx = wrapped_indices(c, 1, x.dim(axis));
  return base + idx * c.graph().scalar(static_cast<double>(strides[static_cast<size_t>(axis)]), DType::i32);
}

void convert_gather_elements(NodeContext& c) {
  Tensor x = c.in(0);
  const int axis = c.axis(c.attr_int("axis", 0), x.rank());
  c.out(0, take(reshape(x, {x.numel()}), element_offsets(c, x, axis), 0), c.type(0));
}

// Scatters `updates` (flattened like `rows`) into the rows of `x2` [R, S]: reduction none writes
// them (rows written twice take their sum: ONNX leaves that order undefined), add adds them.
Tensor scatter_rows(NodeContext& c, Tensor x2, Tensor rows, Tensor updates2, const std::string& reduction) {
  if (reduction == "add") return scatter_add(x2, rows, updates2, 0);
  if (reduction != "none") c.unsupported("reduction '" + reduction + "'");
  Graph& g = c.graph();
  Tensor zeros = broadcast_to(g.scalar(0.0, x2.dtype()), x2.shape());
  Tensor hit = scatter_add(broadcast_to(g.scalar(0.0), {x2.dim(0), 1}), rows,
                           broadcast_to(g.scalar(1.0), {rows.numel(), 1}), 0);
  return where(hit, scatter_add(zeros, rows, updates2, 0), x2);
}

void convert_scatter_elements(NodeContext& c) {
  Tensor x = c.in(0);
  const int axis = c.axis(c.attr_int("axis", 0), x.rank());
  Tensor updates = c.in(2);
  if (updates.shape() != c.shape(1)) c.fail("updates must have the shape of indices");
  Tensor offsets = reshape(element_offsets(c, x, axis), {updates.numel()});
  Tensor y = scatter_rows(c, reshape(x, {x.numel(), 1}), offsets, reshape(updates, {updates.numel(), 1}),
                          c.attr_string("reduction", "none"));
  c.out(0, reshape(y, x.shape()), c.type(0));
}

// GatherND / ScatterND: indices [..., k] address the first k axes of data (after batch_dims
// leading axes shared with indices); the row of a data viewed as [rows, slice].
struct NdRows {
  Tensor rows;          // i32, indices.shape[:-1] flattened
  int64_t rows_total;   // rows of the view
  int64_t slice;        // elements per row
  Shape result_shape;   // indices.shape[:-1] + data.shape[batch + k:]
};

NdRows nd_rows(NodeContext& c, const Tensor& x, int64_t batch_dims) {
  if (!is_integer(c.type(1))) c.fail("indices must be integers");
  const Shape& is = c.shape(1);
  if (is.empty()) c.fail("indices must have rank >= 1");
  const int64_t k = is.back();
  const int64_t b = batch_dims;
  if (b < 0 || b >= static_cast<int64_t>(is.size()) || b + k > x.rank()) c.fail("indices do not fit data");
  for (int64_t a = 0; a < b; ++a) {
    if (is[static_cast<size_t>(a)] != x.dim(static_cast<int>(a))) c.fail("batch axes of indices and data differ");
  }
  check_elements(c, x);
  Graph& g = c.graph();
  NdRows r;
  r.slice = 1;
  for (int a = static_cast<int>(b + k); a < x.rank(); ++a) r.slice *= x.dim(a);
  r.rows_total = x.numel() / r.slice;
  // The row of coordinate (batch..., i_0..i_{k-1}): batch part from the indices' position.
  std::vector<int64_t> row_stride(static_cast<size_t>(b + k));
  int64_t s = 1;
  for (int64_t a = b + k - 1; a >= 0; --a) {
    row_stride[static_cast<size_t>(a)] = s;
    s *= x.dim(static_cast<int>(a));
  }
  const Shape lead(is.begin(), is.end() - 1);
  c.host_limit(mn::numel(lead), "the offsets of the indices");
  std::vector<int> batch_axes;
  std::vector<int64_t> lead_stride(lead.size(), 0);
  for (int64_t a = 0; a < b; ++a) {
    batch_axes.push_back(static_cast<int>(a));
    lead_stride[static_cast<size_t>(a)] = row_stride[static_cast<size_t>(a)];
  }
  Tensor idx = c.in(1);
  if (idx.dtype() != DType::i32) idx = cast(idx, DType::i32);
  Tensor rows = g.constant(coordinate_offsets(lead, batch_axes, lead_stride));
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = x.dim(static_cast<int>(b + j));
    Tensor ij = reshape(slice(idx, -1, j, j + 1), lead);
    ij = where(lt(ij, g.scalar(0, DType::i32)), ij + g.scalar(static_cast<double>(n), DType::i32), ij);
    rows = rows + ij * g.scalar(static_cast<double>(row_stride[static_cast<size_t>(b + j)]), DType::i32);
  }
  r.rows = reshape(rows, {mn::numel(lead)});
  r.result_shape = lead;
  for (int a = static_cast<int>(b + k); a < x.rank(); ++a) r.result_shape.push_back(x.dim(a));
  return r;
}

void convert_gather_nd(NodeContext& c) {
  Tensor x = c.in(0);
  NdRows r = nd_rows(c, x, c.attr_int("batch_dims", 0));
  Tensor y = take(reshape(x, {r.rows_total, r.slice}), r.rows, 0);
  c.out(0, reshape(y, r.result_shape), c.type(0));
}

void convert_scatter_nd(NodeContext& c) {
  Tensor x = c.in(0);
  NdRows r = nd_rows(c, x, 0);
  Tensor updates = c.in(2);
  if (updates.shape() != r.result_shape) c.fail("updates must have shape " + shape_str(r.result_shape));
  Tensor y = scatter_rows(c, reshape(x, {r.rows_total, r.slice}), r.rows,
                          reshape(updates, {r.rows.numel(), r.slice}), c.attr_string("reduction", "none"));
  c.out(0, reshape(y, x.shape()), c.type(0));
}

}  // namespace

void add_indexed_converters(ConverterTable& t) {
  t.add("GatherElements", convert_gather_elements);
  t.add("GatherND", convert_gather_nd);
  t.add("ScatterElements", convert_scatter_elements);
  t.add("Scatter", convert_scatter_elements);  // ScatterElements before opset 11
  t.add("ScatterND", convert_scatter_nd);
}

}  // namespace mn::onnx
