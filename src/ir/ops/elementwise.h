#pragma once
// Attributes of the elementwise ops (src/ir/ops/elementwise.cpp), read by codegen and the
// optimizer, and the internal elementwise ops that have no function in ops.h.
#include <array>
#include <tuple>

#include <meganeura/graph.h>

namespace mn {

struct LeakyReluAttrs {
  double negative_slope = 0.01;
  bool operator==(const LeakyReluAttrs&) const = default;
  auto fields() const { return std::tie(negative_slope); }
  static constexpr std::array<const char*, 1> names{"negative_slope"};
};

struct GeluAttrs {
  GeluApprox approximate = GeluApprox::none;
  bool operator==(const GeluAttrs&) const = default;
  auto fields() const { return std::tie(approximate); }
  static constexpr std::array<const char*, 1> names{"approximate"};
};

// PyTorch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
struct SoftplusAttrs {
  double beta = 1.0;
  double threshold = 20.0;
  bool operator==(const SoftplusAttrs&) const = default;
  auto fields() const { return std::tie(beta, threshold); }
  static constexpr std::array<const char*, 2> names{"beta", "threshold"};
};

struct CastAttrs {
  DType dtype = DType::f32;
  bool operator==(const CastAttrs&) const = default;
  auto fields() const { return std::tie(dtype); }
  static constexpr std::array<const char*, 1> names{"dtype"};
};

struct ClampAttrs {
  double lo = 0.0;
  double hi = 0.0;
  bool operator==(const ClampAttrs&) const = default;
  auto fields() const { return std::tie(lo, hi); }
  static constexpr std::array<const char*, 2> names{"lo", "hi"};
};

// The Gauss error function (internal op "erf"): the primitive behind the exact GELU.
Tensor erf(Tensor x);

}  // namespace mn
