#pragma once
// Attributes of matmul (src/ir/ops/matmul.cpp). A flag transposes the last two axes of its
// operand before the product (it needs an operand of rank >= 2), so the optimizer can fold a
// transpose into the GEMM.
#include <array>
#include <tuple>

namespace mn {

struct MatmulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
  bool operator==(const MatmulAttrs&) const = default;
  auto fields() const { return std::tie(transpose_a, transpose_b); }
  static constexpr std::array<const char*, 2> names{"transpose_a", "transpose_b"};
};

}  // namespace mn
