#pragma once
// Per-element agreement with a reference, relative to each element.
//
// The error of element i is |got_i - want_i| / (|want_i| + floor), floor = floor_fraction ·
// max|want|: relative for every element of the tensor's own scale, and measured against a
// fraction of that scale for elements far below it (zeros, and values that cancelled in a sum,
// where kernels summing in another order are off by an amount relative to the terms, not to
// the result). Unlike max|Δ| / (1 + max|want|), a 5% error on a softmax probability of 4e-4 is
// 5%, not 2e-5, and the measure means the same for tensors of any magnitude.
//
// Where the terms an element was computed from are much larger than the element (a gradient
// that cancels, a variance of values far from zero), f32 arithmetic is off by an amount relative
// to the terms: the overloads taking `terms` (per element, e.g. from conditioning.h) add it to
// the element's scale.
//
// NaN must match NaN and infinities must be equal; integer dtypes must be equal exactly.
#include <cstddef>
#include <string>

#include <gtest/gtest.h>

#include <meganeura/array.h>

namespace mn::testing {

// The default floor: elements below a tenth of the largest are compared at a tenth of it.
inline constexpr double kElementFloor = 0.1;

struct ElementError {
  double error = 0;  // the largest, over the elements (infinite: NaN/Inf/integer mismatch)
  size_t index = 0;  // of that element
  double got = 0, want = 0;
  std::string str() const;  // "element 17: got ..., want ... (relative error ...)"
};

ElementError elementwise_error(const Array& got, const Array& want,
                               double floor_fraction = kElementFloor);
// Element i measured against |want_i| + floor + terms_i.
ElementError elementwise_error(const Array& got, const Array& want, const Array& terms,
                               double floor_fraction = kElementFloor);

// got agrees with want within `tol` by elementwise_error (shapes must agree too).
::testing::AssertionResult elementwise_near(const Array& got, const Array& want, double tol,
                                            double floor_fraction = kElementFloor);
::testing::AssertionResult elementwise_near(const Array& got, const Array& want, double tol,
                                            const Array& terms,
                                            double floor_fraction = kElementFloor);

// The agreement f32, f16 and bf16 storage allows against float64 for kernels that compute in
// f32 (sums in another order, GPU transcendentals): 2e-5 (about 300 f32 rounding units), and
// for 16-bit storage four rounding units of the stored value (2^-11, 2^-8) on top.
double storage_tolerance(DType stored);

}  // namespace mn::testing
