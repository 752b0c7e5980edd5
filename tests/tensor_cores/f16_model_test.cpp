// The f16-operand model itself, on the CPU (these run everywhere, lavapipe included): the
// tensor-core arithmetic emulated in software (packed f16 operands, exact products, f32
// sums, f32 epilogue, stored dtype) fits it at every depth and scale; and the mutations the GPU
// tests are there to catch do not: operands rounded to bf16 instead of f16, operands staged
// without their scale, a dropped epilogue, one wrong element, a NaN.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include <meganeura/array.h>

#include "tensor_cores/coop_product.h"

namespace mn::testing {
namespace {

enum class Staging { packed_f16, unscaled_f16, bf16 };

std::vector<double> staged(const std::vector<double>& v, Staging s, DType dtype) {
  if (dtype == DType::f16) return v;  // read in place
  if (s == Staging::packed_f16) return as_packed_f16(v);
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = round_to_dtype(v[i], s == Staging::bf16 ? DType::bf16 : DType::f16);
  }
  return r;
}

// The kernels' arithmetic in software: staged operands, f32 sums of exact products, the
// epilogue in f32 (or not at all), the output's dtype.
std::vector<double> emulate(const MatmulRun& r, Staging s, bool epilogue = true) {
  const MatmulProblem& p = r.p;
  const auto a = staged(r.operands[0], s, p.dtype), b = staged(r.operands[1], s, p.dtype);
  std::vector<double> c(static_cast<size_t>(p.batch() * p.m * p.n));
  for (int64_t z = 0; z < p.batch(); ++z) {
    const double* A = a.data() + (p.a_batch == 1 ? 0 : z) * p.m * p.k;
    const double* B = b.data() + (p.b_batch == 1 ? 0 : z) * p.k * p.n;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        float acc = 0;
        for (int64_t q = 0; q < p.k; ++q) {
          acc += static_cast<float>((p.ta ? A[q * p.m + i] : A[i * p.k + q]) *
                                    (p.tb ? B[j * p.k + q] : B[q * p.n + j]));
        }
        const size_t at = static_cast<size_t>((z * p.m + i) * p.n + j);
        if (epilogue && p.epilogue == Epilogue::bias_relu) {
          acc = std::max(acc + static_cast<float>(r.operands[2][static_cast<size_t>(j)]), 0.0f);
        } else if (epilogue && p.epilogue == Epilogue::residual) {
          acc += static_cast<float>(r.operands[2][at]);
        }
        c[at] = round_to_dtype(acc, p.dtype);
      }
    }
  }
  return c;
}

TEST(F16OperandModel, TheKernelArithmeticFitsAtEveryDepthAndScale) {
  const MatmulProblem problems[] = {
      {.tag = "short", .m = 48, .n = 40, .k = 16},
      {.tag = "deep", .m = 24, .n = 24, .k = 4096},
      {.tag = "far",
       .m = 40,
       .n = 56,
       .k = 300,
       .ta = true,
       .a_scale = std::ldexp(1.0, -30),
       .b_scale = std::ldexp(1.0, 24)},
      {.tag = "batch", .m = 33, .n = 17, .k = 129, .tb = true, .a_batch = 3},
      {.tag = "f16", .m = 40, .n = 24, .k = 512, .dtype = DType::f16},
      {.tag = "bias", .m = 40, .n = 48, .k = 256, .epilogue = Epilogue::bias_relu},
      {.tag = "residual",
       .m = 20,
       .n = 30,
       .k = 700,
       .a_batch = 2,
       .b_batch = 2,
       .epilogue = Epilogue::residual},
  };
  uint64_t seed = 1;
  for (const MatmulProblem& p : problems) {
    SCOPED_TRACE(p.describe());
    const MatmulRun r = prepare(p, seed++);
    EXPECT_TRUE(fits_f16_model(emulate(r, Staging::packed_f16), r.model));
  }
}

// The statistics the Frobenius check relies on: for random operands the relative error of
// f16 operands against float64 is 2^-10/sqrt(12) ≈ 2.8e-4 whatever K (docs/tensor-cores.md).
TEST(F16OperandModel, RelativeFrobeniusErrorIndependentOfDepth) {
  for (int64_t k : {256, 4096}) {
    SCOPED_TRACE("K = " + std::to_string(k));
    const MatmulRun r = prepare({.tag = "depth", .m = 32, .n = 32, .k = k}, 40 + k);
    const auto got = emulate(r, Staging::packed_f16);
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - r.model.exact[i]) * (got[i] - r.model.exact[i]);
      norm += r.model.exact[i] * r.model.exact[i];
    }
    EXPECT_NEAR(std::sqrt(err / norm), std::ldexp(1.0, -10) / std::sqrt(12.0), 0.8e-4);
  }
}

TEST(F16OperandModel, CatchesBf16Operands) {
  const MatmulRun r = prepare({.tag = "bf16", .m = 64, .n = 64, .k = 512}, 3);
  EXPECT_FALSE(fits_f16_model(emulate(r, Staging::bf16), r.model));
}

TEST(F16OperandModel, CatchesOperandsStagedWithoutTheirScale) {
  const MatmulRun r =
      prepare({.tag = "tiny", .m = 32, .n = 32, .k = 128, .a_scale = std::ldexp(1.0, -30)}, 4);
  EXPECT_TRUE(fits_f16_model(emulate(r, Staging::packed_f16), r.model));
  EXPECT_FALSE(fits_f16_model(emulate(r, Staging::unscaled_f16), r.model));
}

TEST(F16OperandModel, CatchesADroppedEpilogue) {
  for (Epilogue e : {Epilogue::bias_relu, Epilogue::residual}) {
    const MatmulRun r = prepare({.tag = "epilogue", .m = 32, .n = 48, .k = 256, .epilogue = e}, 5);
    EXPECT_TRUE(fits_f16_model(emulate(r, Staging::packed_f16), r.model));
    EXPECT_FALSE(fits_f16_model(emulate(r, Staging::packed_f16, false), r.model));
  }
}

TEST(F16OperandModel, CatchesOneWrongElementAndNaN) {
  const MatmulRun r = prepare({.tag = "one", .m = 64, .n = 64, .k = 1024}, 6);
  auto got = emulate(r, Staging::packed_f16);
  ASSERT_TRUE(fits_f16_model(got, r.model));
  // One element of 4096 off by 1% of its magnitude sum: far inside any whole-matrix norm,
  // outside its own bound (2^-10 + K·2^-23 ≈ 1.1e-3 of it).
  const size_t i = 1234;
  got[i] += 0.01 * r.model.magnitude[i];
  EXPECT_FALSE(fits_f16_model(got, r.model));
  got[i] = NAN;
  EXPECT_FALSE(fits_f16_model(got, r.model));
  got.pop_back();
  EXPECT_FALSE(fits_f16_model(got, r.model));
}

}  // namespace
}  // namespace mn::testing
