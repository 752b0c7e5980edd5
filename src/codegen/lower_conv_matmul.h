#pragma once
// 1×1 convolutions (stride 1, no padding, one group) as matmuls over NCHW, so they take the
// matmul kernels (cooperative-matrix on tensor-core devices, the scalar tiled one elsewhere):
//   conv2d:                 y[n] = W[O, C] · x[n][C, HW]            (+ bias as the epilogue)
//   conv2d_backward_input:  dx[n] = W[O, C]ᵀ · gy[n][O, HW]
//   conv_transpose2d:       the same, plus its bias
//   conv2d_backward_weight: dW[O, C] = Σ_n gy[n][O, HW] · x[n][C, HW]ᵀ (one product when the
//                           batch is 1; else a batched product into scratch, then a sum over n)
// A batch of products takes the cooperative-matrix kernel when their total size passes the
// matmul's thresholds; without it, only products that fill the scalar kernel's 64×64 tiles are
// routed (the implicit GEMM handles skinny ones better). Each returns nullopt when the node is
// not such a convolution, when it is not routed, or when MN_CONV_NO_MATMUL=1 (measuring the
// implicit GEMM on the same shapes).
#include <optional>

#include "codegen/kernel.h"
#include "codegen/matmul_epilogue.h"

namespace mn::codegen {

// `e`: the forward's whole epilogue, the bias included (codegen/lower_conv.h).
std::optional<Lowering> conv1x1_forward(const LowerContext& ctx, const MatmulEpilogue* e);
std::optional<Lowering> conv1x1_backward_input(const LowerContext& ctx);
std::optional<Lowering> conv1x1_transpose(const LowerContext& ctx);
std::optional<Lowering> conv1x1_backward_weight(const LowerContext& ctx);

}  // namespace mn::codegen
