#include "tensor_cores/coop_product.h"

#include <algorithm>
#include <cmath>

#include <meganeura/ops.h>

#include "codegen/glsl.h"
#include "codegen/shader/shader_compiler.h"
#include "runtime/device_pool.h"
#include "runtime/run_lowering.h"

namespace mn::testing {

Shape MatmulProblem::a_shape() const {
  Shape s = ta ? Shape{k, m} : Shape{m, k};
  if (a_batch > 1) s.insert(s.begin(), a_batch);
  return s;
}

Shape MatmulProblem::b_shape() const {
  Shape s = tb ? Shape{n, k} : Shape{k, n};
  if (b_batch > 1) s.insert(s.begin(), b_batch);
  return s;
}

std::string MatmulProblem::describe() const {
  std::string s = tag + ": " + std::to_string(batch()) + "x" + std::to_string(m) + "x" +
                  std::to_string(k) + "x" + std::to_string(n) + (ta ? " ta" : "") +
                  (tb ? " tb" : "") + " " + std::string(dtype_name(dtype));
  if (epilogue == Epilogue::bias_relu) s += " bias+relu";
  if (epilogue == Epilogue::residual) s += " residual";
  return s;
}

std::vector<double> matmul_f64(const MatmulProblem& p, const std::vector<double>& a,
                               const std::vector<double>& b) {
  const int64_t m = p.m, n = p.n, k = p.k;
  std::vector<double> c(static_cast<size_t>(p.batch() * m * n), 0.0);
  // Rows of A and columns of B copied contiguous, so every dot product reads memory in order.
  std::vector<double> rows(static_cast<size_t>(m * k)), cols(static_cast<size_t>(n * k));
  for (int64_t z = 0; z < p.batch(); ++z) {
    const double* A = a.data() + (p.a_batch == 1 ? 0 : z) * m * k;
    const double* B = b.data() + (p.b_batch == 1 ? 0 : z) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t q = 0; q < k; ++q) {
        rows[static_cast<size_t>(i * k + q)] = p.ta ? A[q * m + i] : A[i * k + q];
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t q = 0; q < k; ++q) {
        cols[static_cast<size_t>(j * k + q)] = p.tb ? B[j * k + q] : B[q * n + j];
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      const double* row = rows.data() + i * k;
      for (int64_t j = 0; j < n; ++j) {
        const double* col = cols.data() + j * k;
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += row[q] * col[q];
        c[static_cast<size_t>((z * m + i) * n + j)] = s;
      }
    }
  }
  return c;
}

MatmulRun prepare(const MatmulProblem& p, uint64_t seed) {
  MatmulRun r;
  r.p = p;
  r.node = codegen::testing::matmul_node(p.a_shape(), p.b_shape(), p.ta, p.tb, p.dtype);
  const auto count = [](const Shape& s) {
    int64_t c = 1;
    for (int64_t d : s) c *= d;
    return static_cast<size_t>(c);
  };
  r.operands.push_back(operand_values(count(p.a_shape()), seed, p.a_scale, p.dtype));
  r.operands.push_back(operand_values(count(p.b_shape()), seed + 1, p.b_scale, p.dtype));
  r.dtypes = {p.dtype, p.dtype};
  const size_t outputs = static_cast<size_t>(p.batch() * p.m * p.n);
  // Epilogue operands of the product's own size, so the bound's extra terms are comparable.
  const double product_scale = p.a_scale * p.b_scale * std::sqrt(static_cast<double>(p.k)) / 8;
  if (p.epilogue == Epilogue::bias_relu) {
    r.operands.push_back(
        operand_values(static_cast<size_t>(p.n), seed + 2, product_scale, DType::f32));
    r.dtypes.push_back(DType::f32);
  } else if (p.epilogue == Epilogue::residual) {
    r.operands.push_back(operand_values(outputs, seed + 2, product_scale, DType::f32));
    r.dtypes.push_back(DType::f32);
  }
  std::function<double(double, size_t, bool)> epi;
  if (p.epilogue != Epilogue::none) {
    const std::vector<double> extra = r.operands[2];
    const bool relu = p.epilogue == Epilogue::bias_relu;
    const int64_t n = p.n;
    epi = [extra, relu, n](double v, size_t i, bool magnitude) {
      const double t = extra[relu ? i % static_cast<size_t>(n) : i];
      if (magnitude) return v + std::abs(t);
      return relu ? std::max(v + t, 0.0) : v + t;
    };
  }
  const double rounding = p.dtype == DType::f32 ? 0x1p-11 : 0.0;  // 16-bit operands: exact
  r.model = product_model([&](const auto& a, const auto& b) { return matmul_f64(p, a, b); },
                          r.operands[0], r.operands[1], p.k, rounding, p.dtype, epi);
  return r;
}

std::unique_ptr<codegen::MatmulEpilogue> epilogue_for(const MatmulProblem& p) {
  if (p.epilogue == Epilogue::none) return nullptr;
  auto e = std::make_unique<codegen::MatmulEpilogue>();
  e->extra = {codegen::ArgRef::input(2)};
  if (p.epilogue == Epilogue::bias_relu) {
    e->declarations = codegen::glsl::buffer(3, DType::f32, "bias", true);
    e->body = "return max(acc + bias_ld(n), 0.0);";
  } else {
    e->declarations = codegen::glsl::buffer(3, DType::f32, "res", true);
    e->body = "return acc + res_ld((b * " + std::to_string(p.m) + "u + m) * " +
              std::to_string(p.n) + "u + n);";
  }
  return e;
}

std::vector<double> run_on_device(const codegen::Lowering& l,
                                  const std::vector<std::vector<double>>& operands,
                                  const std::vector<DType>& dtypes, int64_t elements, DType dtype,
                                  bool khr) {
  auto dev = runtime::shared_device("", std::nullopt);
  codegen::CompileOptions co;
  co.target = codegen::target_env_for(dev->capabilities().api_version);
  co.coop_khr = khr;
  return runtime::run_lowering(*dev, l, operands, dtypes, elements, dtype, co);
}

std::vector<double> run_on_device(const codegen::Lowering& l, const MatmulRun& r, bool khr) {
  return run_on_device(l, r.operands, r.dtypes, r.p.batch() * r.p.m * r.p.n, r.p.dtype, khr);
}

}  // namespace mn::testing
