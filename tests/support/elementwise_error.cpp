#include "support/elementwise_error.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mn::testing {

std::string ElementError::str() const {
  std::ostringstream s;
  s.precision(9);
  s << "element " << index << ": got " << got << ", want " << want << " (relative error " << error
    << ")";
  return s.str();
}

namespace {

ElementError measure(const Array& got, const Array& want, const Array* terms,
                     double floor_fraction) {
  ElementError worst;
  if (got.data.size() != want.data.size() || (terms && terms->data.size() != want.data.size())) {
    worst.error = INFINITY;
    return worst;
  }
  double scale = 0;
  for (double w : want.data) {
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  }
  const double floor = std::max(floor_fraction * scale, 1e-300);
  const bool exact = !is_float(want.dtype) || !is_float(got.dtype);
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    double e = 0;
    if (std::isnan(g) || std::isnan(w)) {
      e = std::isnan(g) && std::isnan(w) ? 0.0 : INFINITY;
    } else if (std::isinf(g) || std::isinf(w) || exact) {
      e = g == w ? 0.0 : INFINITY;
    } else {
      e = std::abs(g - w) / (std::abs(w) + floor + (terms ? std::abs(terms->data[i]) : 0.0));
    }
    if (e > worst.error || (i == 0 && e == 0)) worst = {e, i, g, w};
  }
  return worst;
}

::testing::AssertionResult near(const Array& got, const Array& want, double tol, const Array* terms,
                                double floor_fraction) {
  if (got.shape != want.shape) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(got.shape) << ", want " << shape_str(want.shape);
  }
  const ElementError e = measure(got, want, terms, floor_fraction);
  if (e.error <= tol) return ::testing::AssertionSuccess() << e.str();
  return ::testing::AssertionFailure() << e.str() << " above " << tol;
}

}  // namespace

ElementError elementwise_error(const Array& got, const Array& want, double floor_fraction) {
  return measure(got, want, nullptr, floor_fraction);
}

ElementError elementwise_error(const Array& got, const Array& want, const Array& terms,
                               double floor_fraction) {
  return measure(got, want, &terms, floor_fraction);
}

::testing::AssertionResult elementwise_near(const Array& got, const Array& want, double tol,
                                            double floor_fraction) {
  return near(got, want, tol, nullptr, floor_fraction);
}

::testing::AssertionResult elementwise_near(const Array& got, const Array& want, double tol,
                                            const Array& terms, double floor_fraction) {
  return near(got, want, tol, &terms, floor_fraction);
}

double storage_tolerance(DType stored) {
  switch (stored) {
    case DType::f16:
      return 2e-5 + 4 * 0x1p-11;
    case DType::bf16:
      return 2e-5 + 4 * 0x1p-8;
    default:
      return 2e-5;
  }
}

}  // namespace mn::testing
