#include "optimize/mixed_precision.h"

#include <string>

#include <meganeura/ops.h>

#include "ir/graph_rewrite.h"
#include "ir/ops/matmul.h"

namespace mn::optimize {
namespace {

// `x` in `precision`: the tensor it widened, when it is cast(y) of a y already in `precision`.
Tensor narrowed(Graph& out, Tensor x, DType precision) {
  const Node& n = out.node(x.id());
  if (n.op_name() == "cast" && out.node(n.inputs[0]).type.dtype == precision) {
    return Tensor(&out, n.inputs[0]);
  }
  return cast(x, precision);
}

}  // namespace

Graph with_mixed_precision(const Graph& g, DType precision) {
  if (precision == DType::f32) return copy_graph(g);
  if (precision != DType::bf16 && precision != DType::f16) {
    throw Error(std::string("mixed precision must be f32, bf16 or f16, got ") +
                std::string(dtype_name(precision)));
  }
  return rewrite_graph(g, [&](Graph& out, const Node& n, std::span<const Tensor> operands) {
    if (n.op_name() != "matmul" || n.type.dtype != DType::f32 ||
        operands[0].dtype() != DType::f32 || operands[1].dtype() != DType::f32) {
      return Tensor{};
    }
    const auto& attrs = n.attrs.as<MatmulAttrs>();
    const Tensor product = matmul(narrowed(out, operands[0], precision),
                                  narrowed(out, operands[1], precision), attrs.transpose_a,
                                  attrs.transpose_b);
    return cast(product, DType::f32);
  });
}

}  // namespace mn::optimize
