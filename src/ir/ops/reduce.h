#pragma once
// Attributes of the reductions (src/ir/ops/reduce.cpp). Public functions store axes normalized
// (non-negative, sorted, unique, all axes spelled out), so equal reductions compare equal; the
// op definitions also accept negative axes and an empty list (all axes).
#include <array>
#include <cstdint>
#include <tuple>
#include <vector>

#include <meganeura/dtype.h>

namespace mn {

// sum, mean, max, min.
struct ReduceAttrs {
  std::vector<int64_t> axes;
  bool keepdims = false;
  bool operator==(const ReduceAttrs&) const = default;
  auto fields() const { return std::tie(axes, keepdims); }
  static constexpr std::array<const char*, 2> names{"axes", "keepdims"};
};

struct ArgmaxAttrs {
  int64_t axis = 0;
  bool keepdims = false;
  bool operator==(const ArgmaxAttrs&) const = default;
  auto fields() const { return std::tie(axis, keepdims); }
  static constexpr std::array<const char*, 2> names{"axis", "keepdims"};
};

// Divides the sum of squared deviations by (reduced count - correction): 0 biased, 1 unbiased.
struct VarianceAttrs {
  std::vector<int64_t> axes;
  bool keepdims = false;
  int64_t correction = 0;
  bool operator==(const VarianceAttrs&) const = default;
  auto fields() const { return std::tie(axes, keepdims, correction); }
  static constexpr std::array<const char*, 3> names{"axes", "keepdims", "correction"};
};

// sum_to: the target shape, to which the input broadcasts.
struct SumToAttrs {
  Shape shape;
  bool operator==(const SumToAttrs&) const = default;
  auto fields() const { return std::tie(shape); }
  static constexpr std::array<const char*, 1> names{"shape"};
};

}  // namespace mn
