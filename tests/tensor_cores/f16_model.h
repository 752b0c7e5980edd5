#pragma once
// What the tensor-core kernels' results must satisfy, derived from their arithmetic
// (docs/tensor-cores.md, "Accuracy"): every operand rounded once to f16 (after an exact
// power-of-two scale), products of f16 values exact in f32, sums accumulated in f32, the
// result then passed through the epilogue and stored in the output's dtype.
//
// For one output c = Σ_p a_p·b_p of K terms, with S = Σ_p |a_p|·|b_p|:
//   - rounding each operand to f16 (relative error at most u = 2^-11, round to nearest, and
//     no subnormals: the test data keep every scaled operand in f16's normal range) moves c by
//     at most (2u + u²)·S;
//   - f32 accumulation in any order adds at most γ_K·(1 + u)²·S, γ_K = K·2^-23 / (1 - K·2^-23)
//     (a whole ulp per addition: tensor cores truncate when they sum their products);
//   - a 1-Lipschitz epilogue (bias, ReLU, residual) adds its own f32 rounding, counted as two
//     more terms of the sum (S then includes |bias| and |residual|);
//   - an f16 output adds 2^-11 of the stored value, an f32 one 2^-24.
// That bound holds element by element against the float64 result. Random data also say how
// large the error should be as a whole: the Frobenius norm of (result - exact) is that of
// (model - exact), where the model is the float64 product of the operands rounded to f16 on
// the CPU (round to nearest even, as packHalf2x16 does), to within 25% and the f32
// accumulation (2^-23·‖S‖). A kernel that rounds an operand twice, loses the scale, reads a wrong
// element or skips the epilogue fails one of the two.
#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include <meganeura/dtype.h>

namespace mn::testing {

// One product's three float64 evaluations, each already through the epilogue.
struct ProductModel {
  std::vector<double> exact;          // on the operands as given
  std::vector<double> magnitude;      // on |operands| (Σ|a||b|, plus the epilogue's |terms|)
  std::vector<double> model;          // on the operands rounded to f16 as the kernel rounds them
  int64_t k = 0;                      // terms of each sum (the longest, if they differ)
  double operand_rounding = 0x1p-11;  // 0 when the operands are f16 in memory already
  DType output = DType::f32;
};

// A bilinear map (matmul, convolution, its gradients) evaluated in float64.
using Bilinear =
    std::function<std::vector<double>(const std::vector<double>& a, const std::vector<double>& b)>;

// The three evaluations of `product` on operands a and b (`operand_rounding` 0: a and b are
// f16 already). `epilogue(value, i, magnitude)` maps output i (and, with magnitude true, its
// magnitude) through the epilogue; null: identity.
ProductModel product_model(const Bilinear& product, const std::vector<double>& a,
                           const std::vector<double>& b, int64_t k, double operand_rounding,
                           DType output,
                           const std::function<double(double, size_t, bool)>& epilogue = {});

// `got` (the kernel's output, decoded) against the model: the per-element bound and the
// Frobenius norm, each reported with the worst element when it fails.
::testing::AssertionResult fits_f16_model(const std::vector<double>& got, const ProductModel& m);

// `v` as the packing stages it: scaled by the power of two that maps its largest magnitude
// into [2^14, 2^15), rounded to f16 (to nearest even), scaled back.
std::vector<double> as_packed_f16(const std::vector<double>& v);

// Random operand values whose magnitudes lie in [scale·2^-8, scale] with random signs, so no
// scaled f16 operand is subnormal; rounded to `dtype` as stored.
std::vector<double> operand_values(size_t n, uint64_t seed, double scale, DType dtype);

}  // namespace mn::testing
