#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "ir/op_def.h"
#include "support/expect_error.h"

namespace mn {
namespace {

TEST(Graph, SourcesAndOutputs) {
  Graph g;
  auto x = g.input("x", {2, 3});
  auto w = g.parameter("w", {3, 4}, Init::normal(0, 1, 7));
  g.output("x", x);
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.parameters().size(), 1u);
  EXPECT_TRUE(g.find_output("x").has_value());
  EXPECT_THROW(g.input("x", {1}), Error);
  EXPECT_THROW(g.output("x", x), Error);
  EXPECT_THROW(g.input("bad", {2, 0}), ShapeError);
}

// Session::get reads tensors by name: an output may not take another tensor's source name,
// nor a source an output's.
TEST(Graph, OutputsAndSourcesDoNotShareNamesOfOtherTensors) {
  Graph g;
  auto x = g.input("x", {2, 3});
  auto w = g.parameter("w", {3, 4}, Init::zeros());
  g.output("w", w);  // the parameter itself, under its own name
  expect_error<Error>([&] { g.output("x", matmul(x, w)); },
                      {"Graph::output 'x'", "already used by an input, parameter or state"});
  g.output("y", matmul(x, w));
  expect_error<Error>([&] { g.parameter("y", {1}, Init::zeros()); },
                      {"Graph::parameter", "'y' is already used by an output"});
  expect_error<Error>([&] { g.state("y", {1}, Init::zeros()); }, {"already used by an output"});
}

TEST(Graph, HashIsStableAndStructural) {
  auto build = [](double v) {
    Graph g;
    auto x = g.input("x", {2});
    g.output("y", g.scalar(v));
    (void)x;
    return g.hash();
  };
  EXPECT_EQ(build(1.0), build(1.0));
  EXPECT_NE(build(1.0), build(2.0));
}

TEST(Graph, InitializersAreSeededAndScaled) {
  auto a = initialize(Init::kaiming_uniform(3), {256, 64});
  auto b = initialize(Init::kaiming_uniform(3), {256, 64});
  auto c = initialize(Init::kaiming_uniform(4), {256, 64});
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  double bound = std::sqrt(6.0 / 256.0);
  double sumsq = 0;
  for (double v : a.data) {
    EXPECT_LE(std::abs(v), bound + 1e-6);
    sumsq += v * v;
  }
  // Var of U(-b, b) is b²/3 = 2/fan_in.
  EXPECT_NEAR(sumsq / double(a.numel()), 2.0 / 256.0, 0.2 * 2.0 / 256.0);
  auto n = initialize(Init::normal(1.0, 2.0, 9), {4096});
  double mean = 0;
  for (double v : n.data) mean += v;
  EXPECT_NEAR(mean / 4096.0, 1.0, 0.1);
}

// Sizes past int64 are refused where the shape is made, naming the source or op: no later
// stage multiplies dimensions into a wrapped element or byte count.
TEST(Graph, ShapesWhoseSizeOverflowsInt64AreRefused) {
  constexpr int64_t k2to32 = int64_t{1} << 32, k2to31 = int64_t{1} << 31;
  Graph g;
  expect_shape_error(
      [&] {
        g.input("x", {k2to32, k2to32});
      },
      {"Graph::input 'x'", "[4294967296, 4294967296]", "overflows"});
  // 2^62 elements fit int64, their 2^64 bytes do not.
  expect_shape_error(
      [&] {
        g.input("y", {k2to31, k2to31});
      },
      {"Graph::input 'y'", "4611686018427387904 elements", "bytes"});
  expect_shape_error(
      [&] {
        g.parameter("w", {k2to32, k2to32});
      },
      {"Graph::parameter 'w'", "overflows"});
  expect_shape_error([&] { g.state("s", {3, k2to32, k2to32}); }, {"Graph::state 's'", "overflows"});
  EXPECT_TRUE(g.inputs().empty() && g.parameters().empty() && g.states().empty());
  // The largest tensors that still fit are fine to describe (nothing is allocated).
  Tensor a = g.input("a", {k2to31, 1});
  Tensor b = g.input("b", {1, k2to31 / 4});
  EXPECT_EQ((a + b).numel(), int64_t{1} << 60);
  // Shapes an op derives: broadcasting, concatenation, one_hot.
  Tensor c = g.input("c", {1, k2to31});
  expect_shape_error([&] { (void)(a + c); }, {"add", "f32[2147483648, 1]", "bytes"});
  // Three f16 operands whose bytes each fit int64 and whose lengths together overflow it.
  Tensor big = g.input("big", {(int64_t{1} << 62) - 1}, DType::f16);
  expect_shape_error([&] { (void)concat({big, big, big}, 0); }, {"concat", "fits int64"});
  Tensor idx = g.input("idx", {k2to32}, DType::i32);
  expect_shape_error([&] { (void)one_hot(idx, k2to32); }, {"one_hot", "overflows"});
  expect_shape_error([&] { (void)reshape(a, {k2to32, k2to32}); }, {"reshape", "overflows"});
  // Arrays count their elements the same way.
  expect_shape_error([&] { Array({k2to32, k2to32}, DType::f32); }, {"overflows int64"});
}

TEST(Graph, UnknownOpIsAnError) { EXPECT_THROW(op_def("no_such_op"), Error); }

TEST(Dtype, HalfRounding) {
  EXPECT_EQ(round_to_dtype(1.0 + 1.0 / 4096, DType::f16), 1.0);
  EXPECT_EQ(round_to_dtype(65504.0, DType::f16), 65504.0);
  EXPECT_TRUE(std::isinf(round_to_dtype(70000.0, DType::f16)));
  EXPECT_EQ(round_to_dtype(1.0 + 1.0 / 256, DType::bf16), 1.0);
  EXPECT_EQ(round_to_dtype(3.7, DType::i32), 3.0);
  // One rounding from double: 1 + 2^-8 + 2^-40 is above the bf16 halfway point.
  EXPECT_EQ(round_to_dtype(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), DType::bf16),
            1.0 + std::ldexp(1.0, -7));
  EXPECT_TRUE(std::isinf(round_to_dtype(std::ldexp(1.0, 128), DType::bf16)));
}

// Integers truncate and wrap modulo 2^32 as the GPU's 32-bit arithmetic does (u32 takes
// negatives as 0), defined for every double: NaN and infinities store 0.
TEST(Dtype, IntegersWrapModulo2To32) {
  const double k2to32 = 4294967296.0, k2to31 = 2147483648.0;
  EXPECT_EQ(round_to_dtype(-3.7, DType::i32), -3.0);
  EXPECT_EQ(round_to_dtype(k2to31, DType::i32), -k2to31);
  EXPECT_EQ(round_to_dtype(-k2to31 - 1, DType::i32), k2to31 - 1);
  EXPECT_EQ(round_to_dtype(k2to32 + 5, DType::i32), 5.0);
  EXPECT_EQ(round_to_dtype(3e9, DType::i32), 3e9 - k2to32);
  EXPECT_EQ(round_to_dtype(k2to32 + 7, DType::u32), 7.0);
  EXPECT_EQ(round_to_dtype(2 * k2to32 - 2, DType::u32), k2to32 - 2);
  EXPECT_EQ(round_to_dtype(-3.0, DType::u32), 0.0);
  EXPECT_EQ(round_to_dtype(1e300, DType::u32), std::fmod(1e300, k2to32));
  for (DType t : {DType::i32, DType::u32}) {
    EXPECT_EQ(round_to_dtype(std::nan(""), t), 0.0);
    EXPECT_EQ(round_to_dtype(-std::numeric_limits<double>::infinity(), t), 0.0);
  }
}

}  // namespace
}  // namespace mn
