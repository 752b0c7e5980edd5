#include "tensor_cores/f16_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include <meganeura/array.h>

namespace mn::testing {

std::vector<double> as_packed_f16(const std::vector<double>& v) {
  double largest = 0;
  for (double x : v) largest = std::max(largest, std::abs(x));
  if (largest == 0) return v;
  const int e = 14 - static_cast<int>(std::floor(std::log2(largest)));
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = std::ldexp(round_to_dtype(std::ldexp(v[i], e), DType::f16), -e);
  }
  return r;
}

namespace {

std::vector<double> absolute(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  std::transform(v.begin(), v.end(), r.begin(), [](double x) { return std::abs(x); });
  return r;
}

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f16:
      return 0x1p-11;
    case DType::bf16:
      return 0x1p-8;
    default:
      return 0x1p-24;
  }
}

}  // namespace

ProductModel product_model(const Bilinear& product, const std::vector<double>& a,
                           const std::vector<double>& b, int64_t k, double operand_rounding,
                           DType output,
                           const std::function<double(double, size_t, bool)>& epilogue) {
  ProductModel m;
  m.k = k;
  m.operand_rounding = operand_rounding;
  m.output = output;
  m.exact = product(a, b);
  m.magnitude = product(absolute(a), absolute(b));
  m.model = operand_rounding > 0 ? product(as_packed_f16(a), as_packed_f16(b)) : m.exact;
  if (epilogue) {
    for (size_t i = 0; i < m.exact.size(); ++i) {
      m.exact[i] = epilogue(m.exact[i], i, false);
      m.model[i] = epilogue(m.model[i], i, false);
      m.magnitude[i] = epilogue(m.magnitude[i], i, true);
    }
  }
  for (double& v : m.model) v = round_to_dtype(v, output);
  return m;
}

::testing::AssertionResult fits_f16_model(const std::vector<double>& got, const ProductModel& m) {
  if (got.size() != m.exact.size()) {
    return ::testing::AssertionFailure()
           << got.size() << " outputs, the model has " << m.exact.size();
  }
  // One f32 ulp per addition, not half: tensor cores align and truncate the products they sum
  // (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021).
  const double u = m.operand_rounding, uf = 0x1p-23, uo = unit_roundoff(m.output);
  const double terms = static_cast<double>(m.k + 2);  // the epilogue's bias and residual
  const double gamma = terms * uf / (1 - terms * uf);
  const double per_magnitude = 2 * u + u * u + gamma * (1 + u) * (1 + u);
  double worst = 0, err2 = 0, model2 = 0, magnitude2 = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double core = per_magnitude * m.magnitude[i];
    const double bound = core + uo * (std::abs(m.exact[i]) + core);
    const double d = std::abs(got[i] - m.exact[i]);
    // NaN anywhere fails: !(d <= bound).
    const double ratio = d <= bound ? (bound > 0 ? d / bound : 0.0) : INFINITY;
    if (!(ratio <= worst)) {
      worst = ratio;
      at = i;
    }
    err2 += d * d;
    model2 += (m.model[i] - m.exact[i]) * (m.model[i] - m.exact[i]);
    magnitude2 += m.magnitude[i] * m.magnitude[i];
  }
  std::ostringstream why;
  if (worst > 1) {
    why << "element " << at << ": got " << got[at] << ", float64 " << m.exact[at]
        << ", f16-operand bound " << per_magnitude * m.magnitude[at] << " (" << worst
        << " times over)";
    return ::testing::AssertionFailure() << why.str();
  }
  // 1.25: the model's own error has the same size whichever way the sums run; the f32
  // accumulation may differ from the CPU's by an f32 ulp of the magnitudes.
  const double allowed = 1.25 * std::sqrt(model2) + uf * std::sqrt(magnitude2);
  if (!(std::sqrt(err2) <= allowed)) {
    why << "Frobenius error " << std::sqrt(err2) << " against the f16-operand model's "
        << std::sqrt(model2) << " (allowed " << allowed << ")";
    return ::testing::AssertionFailure() << why.str();
  }
  return ::testing::AssertionSuccess() << "worst element at " << worst << " of its bound";
}

std::vector<double> operand_values(size_t n, uint64_t seed, double scale, DType dtype) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> magnitude(-8.0, 0.0);  // log2 of |value| / scale
  std::vector<double> v(n);
  for (double& x : v) {
    const double s = (rng() & 1) ? 1.0 : -1.0;
    x = round_to_dtype(s * scale * std::exp2(magnitude(rng)), dtype);
  }
  return v;
}

}  // namespace mn::testing
