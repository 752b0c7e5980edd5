// GPU behaviour of the elementwise lowerings beyond the op table's samples: exact f16/bf16
// conversions at their rounding ties, overflow, subnormals and NaN; integer arithmetic past
// 2^24 (i32 and u32); relative accuracy where f32 formulas cancel; NaN as the reference treats
// it; the 1-D grid folded past the device's group-count limit; and the 16-bit storage check.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/glsl.h"
#include "gpu_compare.h"
#include "ir/ops/elementwise.h"
#include "lowering_runner.h"

namespace mn {
namespace {

using testing::expect_exact;
using testing::expect_same_values;

const double nan_v = std::numeric_limits<double>::quiet_NaN();
const double inf_v = std::numeric_limits<double>::infinity();

// Values at the edges of the 16-bit formats: halfway ties (nearest even), the largest finite
// values and the overflow threshold, subnormals and the underflow ties, signed zeros, NaN.
std::vector<double> edge_values() {
  std::vector<double> v{0.0, -0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, 1000.5, -2047.5, 3.14159265};
  for (double base : {1.0, 2.0, 1024.0}) {
    for (int bits : {11, 8}) {  // f16 and bf16 halfway points above `base`
      const double half_ulp = std::ldexp(base, -bits);
      for (int m : {1, 3, 5}) v.push_back(base + m * half_ulp);
    }
  }
  for (double x : {65504.0, 65519.0, 65520.0, 65536.0, 1e6, 3.3e38}) {
    v.push_back(x);
    v.push_back(-x);
  }
  for (int e : {-14, -15, -20, -24, -25, -26}) {
    v.push_back(std::ldexp(1.0, e));
    v.push_back(-std::ldexp(3.0, e - 1));
  }
  v.push_back(std::ldexp(3.0, -26));  // between two f16 subnormals: a tie
  v.push_back(6.0e-5);
  v.push_back(1e-8);
  v.push_back(inf_v);
  v.push_back(-inf_v);
  v.push_back(nan_v);
  for (double& x : v) x = static_cast<float>(x);  // the f32 values the GPU receives
  return v;
}

TEST(PointwiseGpu, HalfConversionsRoundToNearestEven) {
  const std::vector<double> values = edge_values();
  const Shape shape{static_cast<int64_t>(values.size())};
  Graph g;
  Tensor x = g.input("x", shape);
  Tensor h = cast(x, DType::f16);
  Tensor b = cast(x, DType::bf16);
  g.output("f16", h);
  g.output("bf16", b);
  // And back: 16-bit loads widen exactly, subnormals included.
  g.output("f16_back", cast(h, DType::f32));
  g.output("bf16_back", cast(b, DType::f32));
  g.output("f16_to_bf16", cast(h, DType::bf16));
  g.output("bf16_to_f16", cast(b, DType::f16));
  expect_exact(g, {{"x", Array(shape, DType::f32, values)}});
}

TEST(PointwiseGpu, HalfInputsLoadExactly) {
  // Every f16 bit pattern class: subnormals, normals, the largest, infinities.
  std::vector<double> values;
  for (int e = -24; e <= 15; ++e) values.push_back(std::ldexp(1.0, e) * (e % 2 ? -1.0 : 1.0));
  for (int m = 1; m < 1024; m += 97) values.push_back(std::ldexp(m, -24));
  values.push_back(65504.0);
  values.push_back(-inf_v);
  const Shape shape{static_cast<int64_t>(values.size())};
  Graph g;
  Tensor x = g.input("x", shape, DType::f16);
  g.output("twice", x + x);  // f16 arithmetic: computed in f32, stored rounded
  g.output("wide", cast(x, DType::f32));
  expect_exact(g, {{"x", Array(shape, DType::f16, values)}});
}

TEST(PointwiseGpu, IntegersStayExactPastFloatPrecision) {
  auto rng = testing::rng_for("pointwise-gpu/ints");
  Graph g;
  const Shape shape{5, 7};
  Tensor a = g.input("a", shape, DType::i32);
  Tensor b = g.input("b", {7}, DType::i32);
  Tensor small = g.input("small", shape, DType::i32);
  Tensor cond = g.input("cond", {5, 1}, DType::i32);
  g.output("add", a + b);
  g.output("sub", a - b);
  g.output("mul", small * small);
  g.output("maximum", maximum(a, b));
  g.output("minimum", minimum(a, b));
  g.output("eq", eq(a, b));
  g.output("lt", lt(a, b));
  g.output("ge", ge(a, b));
  g.output("neg", neg(a));
  g.output("abs", abs(a));
  g.output("clamp", clamp(a, -2e8, 3e8));
  g.output("clamp_wide", clamp(a, -1e12, 1e12));  // bounds past the int range saturate
  g.output("where", where(cond, a, b));
  g.output("to_u32", cast(a, DType::u32));
  g.output("to_f32", cast(a, DType::f32));
  reference::Feeds feeds;
  feeds["a"] = testing::random_array(rng, {shape, DType::i32}, -4e8, 4e8);
  feeds["b"] = testing::random_array(rng, {{7}, DType::i32}, -4e8, 4e8);
  // Equal neighbours past 2^24 for eq/lt/ge.
  feeds["a"].data[0] = 16777217;
  feeds["b"].data[0] = 16777217;
  feeds["a"].data[1] = 16777217;
  feeds["b"].data[1] = 16777216;
  feeds["small"] = testing::random_array(rng, {shape, DType::i32}, -4e4, 4e4);
  feeds["cond"] = testing::random_array(rng, {{5, 1}, DType::i32}, 0, 2);
  expect_exact(g, feeds);
}

TEST(PointwiseGpu, UnsignedIntegersCompareAsUnsigned) {
  Graph g;
  const Shape shape{6};
  Tensor a = g.input("a", shape, DType::u32);
  Tensor b = g.input("b", shape, DType::u32);
  g.output("maximum", maximum(a, b));
  g.output("minimum", minimum(a, b));
  g.output("lt", lt(a, b));
  g.output("add", a + b);
  g.output("sub", a - b);  // the reference stores negatives as 0
  g.output("abs", abs(a));
  // Below 2^31 (above, the reference's conversion is undefined).
  g.output("to_i32", cast(g.input("c", {3}, DType::u32), DType::i32));
  reference::Feeds feeds;
  feeds["a"] = Array(shape, DType::u32, {3e9, 5, 2147483648.0, 4294967295.0, 16777217, 0});
  feeds["b"] = Array(shape, DType::u32, {7, 2147483647.0, 2147483649.0, 0, 16777216, 9});
  feeds["c"] = Array({3}, DType::u32, {2147483647.0, 16777217, 0});
  expect_exact(g, feeds);
}

// Relative error per element: these values are tiny, so the harness's max-norm measure would
// not see a loss of relative precision.
void expect_relative(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.data.size(), want.data.size());
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double w = want.data[i];
    const double err = std::abs(got.data[i] - w) / std::max(std::abs(w), 1e-30);
    EXPECT_LE(err, tol) << what << "[" << i << "]: got " << got.data[i] << ", want " << w;
  }
}

TEST(PointwiseGpu, TranscendentalsKeepRelativeAccuracy) {
  std::vector<double> small;
  for (double m : {0.4, 0.1, 3e-2, 1e-3, 2e-5, 1e-7}) {
    small.push_back(m);
    small.push_back(-m * 1.3);
  }
  std::vector<double> negative{-1.0, -3.0, -5.0, -8.0, -12.0, -20.0, -40.0, -80.0};
  for (auto* v : {&small, &negative}) {
    for (double& x : *v) x = static_cast<float>(x);
  }
  Graph g;
  Tensor s = g.input("s", {static_cast<int64_t>(small.size())});
  Tensor n = g.input("n", {static_cast<int64_t>(negative.size())});
  g.output("tanh", tanh(s));
  g.output("erf", erf(s));
  g.output("gelu_small", gelu(s));
  // Down to where the double reference itself cancels (1 + tanh(u) below 1e-16).
  Tensor n5 = g.input("n5", {4});
  g.output("gelu_negative", gelu(n5, GeluApprox::none));
  g.output("gelu_tanh_negative", gelu(n5, GeluApprox::tanh));
  g.output("softplus_negative", softplus(n));
  g.output("sigmoid_negative", sigmoid(n));
  g.output("silu_negative", silu(n));
  reference::Feeds feeds{
      {"s", Array({static_cast<int64_t>(small.size())}, DType::f32, small)},
      {"n", Array({static_cast<int64_t>(negative.size())}, DType::f32, negative)},
      {"n5", Array({4}, DType::f32, {-1.0, -2.5, -4.0, -5.0})}};
  auto want = reference::evaluate(g, feeds);
  auto got = testing::run_gpu(g, feeds);
  for (const auto& [name, expected] : want) expect_relative(got.at(name), expected, 2e-6, name);
}

TEST(PointwiseGpu, SinCosOfLargeAngles) {
  // Positions times frequencies (rotary embeddings) reach thousands of radians.
  std::vector<double> x;
  for (double v : {0.5, -2.0, 3.14159, 100.25, -777.7, 4095.0, 12345.6, -30000.1}) {
    x.push_back(static_cast<float>(v));
  }
  const Shape shape{static_cast<int64_t>(x.size())};
  Graph g;
  Tensor t = g.input("x", shape);
  g.output("sin", sin(t));
  g.output("cos", cos(t));
  reference::Feeds feeds{{"x", Array(shape, DType::f32, x)}};
  auto want = reference::evaluate(g, feeds);
  auto got = testing::run_gpu(g, feeds);
  for (const auto& [name, expected] : want) {
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(got.at(name).data[i], expected.data[i], 2e-6) << name << "(" << x[i] << ")";
    }
  }
}

TEST(PointwiseGpu, NaNBehavesAsInTheReference) {
  const Shape shape{6};
  Graph g;
  Tensor a = g.input("a", shape);
  Tensor b = g.input("b", shape);
  g.output("maximum", maximum(a, b));
  g.output("minimum", minimum(a, b));
  g.output("relu", relu(a));
  g.output("clamp", clamp(a, -0.5, 0.5));
  g.output("eq", eq(a, b));
  g.output("ne", ne(a, b));
  g.output("lt", lt(a, b));
  g.output("where", where(a, b, a));
  g.output("abs", abs(a));
  g.output("f16", cast(a, DType::f16));
  g.output("bf16", cast(b, DType::bf16));
  reference::Feeds feeds;
  feeds["a"] = Array(shape, DType::f32, {nan_v, 1.0, nan_v, -inf_v, 2.0, 0.25});
  feeds["b"] = Array(shape, DType::f32, {1.0, nan_v, nan_v, 3.0, -inf_v, 0.25});
  expect_exact(g, feeds);
}

TEST(PointwiseGpu, GridFoldsPastTheGroupLimit) {
  auto rng = testing::rng_for("pointwise-gpu/fold");
  struct Fold {
    int64_t rows;
    uint32_t limit;
    std::array<uint32_t, 3> groups;
  };
  // 10000 elements, one a thread: 40 groups of 256 in a 7 × 6 grid whose last row overhangs.
  // 90000 elements, four a thread: 88 groups in 10 × 9.
  for (const Fold& f : {Fold{40, 7, {7, 6, 1}}, Fold{360, 10, {10, 9, 1}}}) {
    SCOPED_TRACE(f.rows);
    Graph g;
    Tensor x = g.input("x", {f.rows, 250});
    Tensor y = g.input("y", {250});
    Tensor out = x * y;
    const std::vector<Array> inputs{testing::random_array(rng, {{f.rows, 250}, DType::f32}),
                                    testing::random_array(rng, {{250}, DType::f32})};
    const Array want = testing::stored(reference::evaluate_nodes(
        g, {{"x", inputs[0]}, {"y", inputs[1]}}, std::vector<NodeId>{out.id()})[0]);
    codegen::DeviceTraits traits = testing::device_traits();
    traits.max_group_count = f.limit;
    const codegen::Lowering low = testing::lower_node(g, out.id(), traits);
    ASSERT_EQ(low.launches.size(), 1u);
    EXPECT_EQ(low.launches[0].groups, f.groups);
    expect_same_values(testing::run_lowering(g, out.id(), inputs, traits), want, "folded");
    traits.max_group_count = f.limit - 2;  // no longer fits
    EXPECT_THROW(testing::lower_node(g, out.id(), traits), Error);
  }
}

TEST(PointwiseGpu, LinearGridCoversExactly) {
  codegen::DeviceTraits traits;
  for (uint32_t limit : {1u, 3u, 65535u}) {
    traits.max_group_count = limit;
    for (uint64_t n : {0ull, 1ull, 255ull, 256ull, 257ull, 1000ull, 65535ull * 3 + 1}) {
      const uint64_t groups = std::max<uint64_t>(1, (n + 255) / 256);
      if (groups > uint64_t{limit} * limit) {
        EXPECT_THROW(codegen::glsl::linear_grid(n, traits), Error) << n << " " << limit;
        continue;
      }
      const auto l = codegen::glsl::linear_grid(n, traits);
      SCOPED_TRACE(std::to_string(n) + " elements, limit " + std::to_string(limit));
      EXPECT_LE(l.groups[0], limit);
      EXPECT_LE(l.groups[1], limit);
      EXPECT_EQ(l.groups[2], 1u);
      // Enough groups, and less than one extra row of them.
      const uint64_t launched = uint64_t{l.groups[0]} * l.groups[1];
      EXPECT_GE(launched, groups);
      EXPECT_LT(launched - groups, l.groups[0]);
    }
  }
  traits.max_group_count = 65535;
  EXPECT_THROW(codegen::glsl::linear_grid(uint64_t{1} << 33, traits), Error);
}

TEST(PointwiseGpu, SixteenBitTensorsNeedStorageAccess) {
  Graph g;
  Tensor h = g.input("h", {4}, DType::f16);
  Tensor f = g.input("f", {4});
  Tensor half_op = h * h;
  Tensor widen = cast(h, DType::f32);
  Tensor narrow = cast(f, DType::bf16);
  Tensor plain = f * f;
  codegen::DeviceTraits traits = testing::device_traits();
  traits.storage_16bit = false;
  for (Tensor t : {half_op, widen, narrow}) {
    try {
      testing::lower_node(g, t.id(), traits);
      ADD_FAILURE() << "lowered " << g.node(t.id()).op_name() << " without 16-bit storage";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("16-bit storage"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(testing::lower_node(g, plain.id(), traits));
}

}  // namespace
}  // namespace mn
