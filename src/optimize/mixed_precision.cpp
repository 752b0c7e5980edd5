#include "optimize/mixed_precision.h"

#include <algorithm>
#include <string>
#include <vector>

#include <meganeura/ops.h>

#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "ir/ops/attention.h"
#include "ir/ops/matmul.h"

namespace mn::optimize {
namespace {

// `x` in `precision`: the tensor it widened, when it is cast(y) of a y already in `precision`;
// through a reshape of a computed value, the reshape of that value narrowed, so the cast sits
// next to the value's producer (and fuses into its kernel) rather than after a view.
Tensor narrowed(Graph& out, Tensor x, DType precision) {
  const Node& n = out.node(x.id());
  if (n.op_name() == "cast" && out.node(n.inputs[0]).type.dtype == precision) {
    return Tensor(&out, n.inputs[0]);
  }
  if (n.op_name() == "reshape" && !is_source_op(out.node(n.inputs[0]).op_name())) {
    const Shape shape = n.type.shape;
    return reshape(narrowed(out, Tensor(&out, n.inputs[0]), precision), shape);
  }
  return cast(x, precision);
}

// The product `x` widens, when x = cast(matmul, f32) of a 16-bit product this rewrite made.
Tensor widened_product(Graph& out, Tensor x, DType precision) {
  const Node& n = out.node(x.id());
  if (n.op_name() != "cast" || n.type.dtype != DType::f32) return {};
  const Node& p = out.node(n.inputs[0]);
  if (p.op_name() != "matmul" || p.type.dtype != precision) return {};
  return Tensor(&out, n.inputs[0]);
}

// Products of fewer than kMinExtent rows or columns (matrix-vector products: a decoded token)
// stay f32: they are bound by reading the weights, which 16-bit operands would not shorten, and
// their kernels absorb the norm in front of them (schedule/gemv_fusion.h), which a cast between
// would prevent.
constexpr int64_t kMinExtent = 16;

bool large_enough(const TensorType& product) {
  const Shape& s = product.shape;
  const int64_t rows = s.size() >= 2 ? s[s.size() - 2] : 1;
  const int64_t cols = s.empty() ? 1 : s.back();
  return rows >= kMinExtent && cols >= kMinExtent;
}

// The attention node `n` with its f32 matrix operands (ops::attention_matrix_operands; masks,
// log-sum-exps and deltas stay f32) read rounded to `precision`; an invalid tensor where it has
// none.
Tensor with_rounded_operands(Graph& out, const Node& n, std::span<const Tensor> operands,
                             DType precision) {
  const size_t rounded = std::min(ops::attention_matrix_operands(n.op_name()), operands.size());
  if (rounded == 0 || n.type.dtype != DType::f32) return Tensor{};
  std::vector<Tensor> in(operands.begin(), operands.end());
  bool any = false;
  for (size_t i = 0; i < rounded; ++i) {
    if (in[i].dtype() != DType::f32) continue;
    in[i] = cast(narrowed(out, in[i], precision), DType::f32);
    any = true;
  }
  return any ? out.apply(n.op_name(), n.attrs, in) : Tensor{};
}

}  // namespace

Graph with_mixed_precision(const Graph& g, DType precision, const MixedPrecisionOptions& o) {
  if (precision == DType::f32) return copy_graph(g);
  if (precision != DType::bf16 && precision != DType::f16) {
    throw Error(std::string("mixed precision must be f32, bf16 or f16, got ") +
                std::string(dtype_name(precision)));
  }
  return rewrite_graph(g, [&](Graph& out, const Node& n, std::span<const Tensor> operands) {
    // A reshape of a widened product widens the reshaped product instead: the cast then meets
    // the (pointwise) readers of the reshape and fuses into their kernel.
    if (n.op_name() == "reshape") {
      const Tensor product = widened_product(out, operands[0], precision);
      return product.valid() ? cast(reshape(product, n.type.shape), DType::f32) : Tensor{};
    }
    if (o.attention_operands) {
      if (const Tensor a = with_rounded_operands(out, n, operands, precision); a.valid()) return a;
    }
    if (n.op_name() != "matmul" || n.type.dtype != DType::f32 ||
        operands[0].dtype() != DType::f32 || operands[1].dtype() != DType::f32 ||
        !large_enough(n.type)) {
      return Tensor{};
    }
    const auto& attrs = n.attrs.as<MatmulAttrs>();
    const Tensor product = matmul(narrowed(out, operands[0], precision),
                                  narrowed(out, operands[1], precision), attrs.transpose_a,
                                  attrs.transpose_b);
    return cast(product, DType::f32);
  });
}

namespace {

bool is_movement(std::string_view op) {
  return op == "reshape" || op == "permute" || op == "transpose" || op == "squeeze" ||
         op == "unsqueeze" || op == "broadcast_to" || op == "slice";
}

// One pass; `moved` tells whether any cast moved.
Graph move_casts_once(const Graph& g, bool& moved) {
  return rewrite_graph(g, [&](Graph& out, const Node& n, std::span<const Tensor> operands) {
    if (operands.size() != 1) return Tensor{};
    const Node& in = out.node(operands[0].id());
    const Node& source = out.node(in.inputs.empty() ? operands[0].id() : in.inputs[0]);
    // A 16-bit value widened and narrowed back is the value itself (widening is exact).
    if (n.op_name() == "cast" && in.op_name() == "cast" && is_half_float(n.type.dtype) &&
        in.type.dtype == DType::f32 && source.type.dtype == n.type.dtype) {
      moved = true;
      return Tensor(&out, in.inputs[0]);
    }
    if (is_movement(n.op_name()) && in.op_name() == "cast" && in.type.dtype == DType::f32 &&
        is_half_float(source.type.dtype) && !is_source_op(source.op_name())) {
      moved = true;
      const Tensor narrow(&out, in.inputs[0]);
      return cast(out.apply(n.op_name(), n.attrs, {narrow}), DType::f32);
    }
    if (n.op_name() == "cast" && is_half_float(n.type.dtype) && is_movement(in.op_name()) &&
        out.node(in.inputs[0]).type.dtype == DType::f32) {
      moved = true;
      const Tensor wide(&out, in.inputs[0]);
      return out.apply(in.op_name(), in.attrs, {cast(wide, n.type.dtype)});
    }
    return Tensor{};
  });
}

}  // namespace

Graph casts_through_movement(const Graph& g) {
  // Each pass moves a cast across one op; chains of views are short.
  constexpr int kMaxPasses = 8;
  Graph current = copy_graph(g);
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool moved = false;
    Graph next = move_casts_once(current, moved);
    if (!moved) break;
    current = std::move(next);
  }
  return current;
}

}  // namespace mn::optimize
