// Reference values of the inference ops with runtime positions: rope_positions against rope at
// the same positions and against Llama 3 fixtures (rope_llama3_fixtures.json, made by
// make_rope_llama3_fixtures.py with transformers' formula in numpy), cached_attention against
// scaled_dot_product_attention (causal, explicit masks), and the shape errors of both.
// GPU agreement: tests/conformance (op table samples and inference_ops_gpu_test).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>

#include "ir/ops/attention.h"
#include "support/random_fill.h"

#include "support/expect_error.h"

namespace mn {
namespace {

using nlohmann::json;

struct Fed {
  Graph g;
  reference::Feeds feeds;
  Tensor random(const std::string& name, Shape shape, double lo = -1.0, double hi = 1.0) {
    auto rng = testing::rng_for("attention_positions_test/" + name);
    feeds[name] = testing::random_array(rng, {shape, DType::f32}, lo, hi);
    return g.input(name, std::move(shape));
  }
  Tensor ints(const std::string& name, Shape shape, std::vector<double> values) {
    feeds[name] = Array(shape, DType::i32, std::move(values));
    return g.input(name, std::move(shape), DType::i32);
  }
  Array eval(Tensor t) {
    return reference::evaluate_nodes(g, feeds, std::vector<NodeId>{t.id()})[0];
  }
};

void expect_close(const Array& got, const Array& want, double tol) {
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LE(testing::relative_error(got, want), tol);
}

std::vector<double> iota(int64_t from, int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(from + i));
  return v;
}

TEST(RopePositions, EqualsRopeAtTheSameOffsets) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 5, 8}, -2.0, 2.0);
  Tensor pos = f.ints("pos", {5}, iota(7, 5));
  expect_close(f.eval(rope_positions(x, pos, 500.0)), f.eval(rope(x, 500.0, 7)), 1e-15);
}

TEST(RopePositions, PerSequenceOffsetsBroadcastOverHeads) {
  Fed f;
  Tensor x = f.random("x", {2, 3, 4, 6}, -2.0, 2.0);
  std::vector<double> p = iota(0, 4);
  for (double v : iota(9, 4)) p.push_back(v);
  Tensor pos = f.ints("pos", {2, 1, 4}, p);
  const Array got = f.eval(rope_positions(x, pos));
  for (int64_t b = 0; b < 2; ++b) {
    Tensor xb = slice(x, 0, b, b + 1);
    const Array want = f.eval(rope(xb, 10000.0, b == 0 ? 0 : 9));
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_NEAR(got.data[b * want.numel() + i], want.data[i], 1e-15) << b << " " << i;
  }
}

TEST(RopePositions, BackwardTurnsBack) {
  Fed f;
  Tensor x = f.random("x", {3, 2, 8}, -2.0, 2.0);
  Tensor pos = f.ints("pos", {3, 2}, {0, 5, 100, 2000, -3, 70000});
  Tensor y = rope_positions(x, pos, 10000.0, Llama3RopeScaling{8.0, 1.0, 4.0, 64});
  Tensor back = f.g.apply("rope_positions_backward", f.g.node(y.id()).attrs, {y, pos});
  expect_close(f.eval(back), f.eval(x), 1e-14);
}

const json& llama3_fixtures() {
  static const json j = [] {
    const std::string path =
        std::string(MN_SOURCE_DIR) + "/tests/ir/fixtures/rope_llama3_fixtures.json";
    std::ifstream in(path);
    if (!in) throw Error("cannot open " + path);
    return json::parse(in);
  }();
  return j;
}

TEST(RopePositions, Llama3ScalingMatchesTransformersFormula) {
  for (const json& c : llama3_fixtures().at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const RopePositionsAttrs a{c.at("theta"),
                               true,
                               c.at("factor"),
                               c.at("low_freq_factor"),
                               c.at("high_freq_factor"),
                               c.at("original_max_position")};
    const int64_t dim = c.at("dim");
    const auto want_freq = c.at("inv_freq").get<std::vector<double>>();
    const std::vector<double> freq = ops::rope_inv_freq(a, dim);
    ASSERT_EQ(freq.size(), want_freq.size());
    for (size_t i = 0; i < freq.size(); ++i)
      EXPECT_NEAR(freq[i], want_freq[i], 1e-15 * want_freq[i]) << i;

    const auto positions = c.at("positions").get<std::vector<double>>();
    const auto rows = static_cast<int64_t>(positions.size());
    Fed f;
    f.feeds["x"] = Array({rows, dim}, DType::f32, c.at("x").get<std::vector<double>>());
    Tensor x = f.g.input("x", {rows, dim});
    Tensor pos = f.ints("pos", {rows}, positions);
    Tensor y = rope_positions(x, pos, a.theta,
                              Llama3RopeScaling{a.factor, a.low_freq_factor, a.high_freq_factor,
                                                a.original_max_position});
    expect_close(f.eval(y), Array({rows, dim}, DType::f32, c.at("y").get<std::vector<double>>()),
                 1e-11);
  }
}

TEST(RopePositions, ScalingChangesOnlyLowAndMediumFrequencies) {
  // Without llama3 the fixture's small head would turn by theta^(-2i/D) everywhere; with it the
  // highest frequency (wavelength 2 pi < 64 / 4) stays and the lowest is divided by factor.
  RopePositionsAttrs plain{10000.0};
  RopePositionsAttrs scaled{10000.0, true, 4.0, 1.0, 4.0, 64};
  const auto p = ops::rope_inv_freq(plain, 16), s = ops::rope_inv_freq(scaled, 16);
  EXPECT_EQ(s[0], p[0]);
  EXPECT_DOUBLE_EQ(s[7], p[7] / 4.0);
  EXPECT_GT(s[2], p[2] / 4.0);
  EXPECT_LT(s[2], p[2]);
}

TEST(RopePositions, BadOperandsAreShapeErrors) {
  Graph g;
  Tensor x = g.input("x", {2, 4, 6});
  expect_shape_error([&] { rope_positions(x, g.input("p", {4})); },
                     {"rope_positions", "i32 positions", "[2, 4, 6]"});
  expect_shape_error([&] { rope_positions(x, g.input("q", {3}, DType::i32)); },
                     {"rope_positions", "broadcastable", "[2, 4]"});
  expect_shape_error(
      [&] {
        rope_positions(g.input("odd", {4, 5}), g.input("r", {4}, DType::i32));
      },
      {"rope_positions", "D even"});
  expect_shape_error(
      [&] {
        rope_positions(g.input("i", {4, 6}, DType::i32), g.input("s", {4}, DType::i32));
      },
      {"rope_positions", "float x"});
  expect_shape_error(
      [&] {
        rope_positions(x, g.input("t", {4}, DType::i32), 10000.0,
                       Llama3RopeScaling{8.0, 4.0, 1.0, 8192});
      },
      {"rope_positions", "low_freq_factor < high_freq_factor"});
}

// ---- cached_attention ----

TEST(CachedAttention, PrefillPositionsEqualCausal) {
  Fed f;
  Tensor q = f.random("q", {2, 4, 5, 3}), k = f.random("k", {2, 2, 5, 3});
  Tensor v = f.random("v", {2, 2, 5, 4});
  Tensor pos = f.ints("pos", {5}, iota(0, 5));
  expect_close(f.eval(cached_attention(q, k, v, pos)),
               f.eval(scaled_dot_product_attention(q, k, v, {}, true)), 1e-15);
}

// Right-padded prompts of different lengths in a cache of T slots, with decoding positions:
// each query sees the keys up to its own position, as an explicit -inf mask says.
TEST(CachedAttention, PerQueryPositionsEqualExplicitMask) {
  Fed f;
  const int64_t T = 11;
  Tensor q = f.random("q", {2, 6, 3, 4}), k = f.random("k", {2, 3, T, 4});
  Tensor v = f.random("v", {2, 3, T, 2});
  const std::vector<double> p{0, 1, 2, 7, 8, 10};
  Tensor pos = f.ints("pos", {2, 1, 3}, p);
  Array mask({2, 1, 3, T}, DType::f32);
  for (size_t r = 0; r < p.size(); ++r) {
    for (int64_t j = 0; j < T; ++j)
      mask.data[r * T + j] = j <= p[r] ? 0.0 : -std::numeric_limits<double>::infinity();
  }
  Tensor m = f.g.constant(mask);
  expect_close(f.eval(cached_attention(q, k, v, pos, 0.3)),
               f.eval(scaled_dot_product_attention(q, k, v, m, false, 0.3)), 1e-15);
}

TEST(CachedAttention, NegativePositionSeesNothing) {
  Fed f;
  Tensor q = f.random("q", {1, 2, 4}), k = f.random("k", {1, 6, 4}), v = f.random("v", {1, 6, 4});
  const Array out = f.eval(cached_attention(q, k, v, f.ints("pos", {2}, {-1, 3})));
  for (int e = 0; e < 4; ++e) EXPECT_EQ(out.data[e], 0.0);
  EXPECT_NE(out.data[4], 0.0);
}

TEST(CachedAttention, BadOperandsAreShapeErrors) {
  Graph g;
  Tensor q = g.input("q", {1, 4, 2, 8}), k = g.input("k", {1, 2, 16, 8});
  Tensor v = g.input("v", {1, 2, 16, 8});
  expect_shape_error(
      [&] {
        cached_attention(q, k, v, g.input("p", {1, 1, 2}));
      },
      {"cached_attention", "i32 positions"});
  expect_shape_error([&] { cached_attention(q, k, v, g.input("p3", {3}, DType::i32)); },
                     {"cached_attention", "broadcastable to [..., Hq, Lq] = [1, 4, 2]"});
  expect_shape_error(
      [&] {
        cached_attention(q, g.input("k3", {1, 3, 16, 8}), g.input("v3", {1, 3, 16, 8}),
                         g.input("p1", {2}, DType::i32));
      },
      {"cached_attention", "key/value heads"});
  expect_shape_error(
      [&] {
        cached_attention(q, g.input("k7", {1, 2, 16, 7}), v, g.input("p2", {2}, DType::i32));
      },
      {"cached_attention", "same last dimension"});
  // Caches narrower than the query are fine (a bf16 KV cache); caches of two dtypes, or integer
  // ones, are not.
  Tensor kb = g.input("kb", {1, 2, 16, 8}, DType::bf16),
         vb = g.input("vb", {1, 2, 16, 8}, DType::bf16);
  Tensor p = g.input("p16", {2}, DType::i32);
  EXPECT_EQ(cached_attention(q, kb, vb, p).dtype(), DType::f32);
  expect_shape_error([&] { cached_attention(q, kb, v, p); },
                     {"cached_attention", "k and v of one float dtype"});
  expect_shape_error(
      [&] {
        cached_attention(q, g.input("ki", {1, 2, 16, 8}, DType::i32),
                         g.input("vi", {1, 2, 16, 8}, DType::i32), p);
      },
      {"cached_attention", "k and v of one float dtype"});
}

// A cache takes an update of any float dtype (rounded to its own as it is stored), not an
// integer one nor an integer cache.
TEST(CacheWrite, UpdatesOfAnyFloatDtype) {
  Graph g;
  Tensor cache = g.input("c", {1, 2, 6, 4}, DType::bf16), p = g.input("p", {1}, DType::i32);
  EXPECT_EQ(cache_write(cache, g.input("u", {1, 2, 1, 4}), p).dtype(), DType::bf16);
  expect_shape_error(
      [&] {
        cache_write(cache, g.input("ui", {1, 2, 1, 4}, DType::i32), p);
      },
      {"cache_write", "a float cache and update"});
  expect_shape_error(
      [&] {
        cache_write(g.input("ci", {1, 2, 6, 4}, DType::i32), g.input("u2", {1, 2, 1, 4}), p);
      },
      {"cache_write", "a float cache and update"});
}

}  // namespace
}  // namespace mn
