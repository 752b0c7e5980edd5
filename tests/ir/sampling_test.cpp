// Reference semantics of sample_tokens: greedy decoding, the temperature / top-k / top-p filters
// (checked by the frequencies of many seeded draws against hand-derived distributions), edge
// cases of top-p, determinism in (seed, step, row), and shape errors. GPU agreement:
// tests/conformance (op table samples and inference_ops_gpu_test).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>

#include "support/expect_error.h"

namespace mn {
namespace {

struct Params {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
};

// A graph sampling one or more rows of logits with scalar parameters, evaluated per seed/step.
struct Sampler {
  Graph g;
  reference::Feeds feeds;
  Tensor out;
  Sampler(const std::vector<std::vector<double>>& rows, Params p) {
    const auto b = static_cast<int64_t>(rows.size()), v = static_cast<int64_t>(rows[0].size());
    std::vector<double> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    feeds["logits"] = Array({b, v}, DType::f32, flat);
    feeds["t"] = Array({}, DType::f32, {p.temperature});
    feeds["k"] = Array({}, DType::i32, {static_cast<double>(p.top_k)});
    feeds["p"] = Array({}, DType::f32, {p.top_p});
    out = sample_tokens(g.input("logits", {b, v}), g.input("t", {}), g.input("k", {}, DType::i32),
                        g.input("p", {}), g.input("seed", {}, DType::u32),
                        g.input("step", {}, DType::i32));
  }
  std::vector<int64_t> draw(uint32_t seed, int32_t step) {
    feeds["seed"] = Array({}, DType::u32, {static_cast<double>(seed)});
    feeds["step"] = Array({}, DType::i32, {static_cast<double>(step)});
    const Array a = reference::evaluate_nodes(g, feeds, std::vector<NodeId>{out.id()})[0];
    return std::vector<int64_t>(a.data.begin(), a.data.end());
  }
};

std::vector<double> logs(const std::vector<double>& probs) {
  std::vector<double> l;
  for (double p : probs) l.push_back(std::log(p));
  return l;
}

// The frequencies of `draws` single-row samples over (seed, step) pairs.
std::map<int64_t, double> frequencies(const std::vector<double>& logits, Params p, int draws) {
  Sampler s({logits}, p);
  std::map<int64_t, double> f;
  for (int i = 0; i < draws; ++i) f[s.draw(static_cast<uint32_t>(i / 100), i % 100)[0]] += 1.0;
  for (auto& [t, c] : f) c /= draws;
  return f;
}

// Every token's frequency within 5 standard deviations of its probability; tokens with
// probability 0 never drawn.
void expect_distribution(const std::map<int64_t, double>& freq,
                         const std::map<int64_t, double>& want, int draws) {
  for (const auto& [t, f] : freq) EXPECT_TRUE(want.count(t)) << "token " << t << " drawn";
  for (const auto& [t, p] : want) {
    const double got = freq.count(t) ? freq.at(t) : 0.0;
    EXPECT_NEAR(got, p, 5.0 * std::sqrt(p * (1 - p) / draws) + 1e-12) << "token " << t;
  }
}

TEST(SampleTokens, GreedyIsTheFirstArgmax) {
  Sampler s({{0.5, 3.0, -1.0, 3.0}, {-2.0, -1.0, -3.0, -1.5}}, {0.0, 2, 0.5});
  for (uint32_t seed : {0u, 1u, 77u}) EXPECT_EQ(s.draw(seed, 3), (std::vector<int64_t>{1, 1}));
}

TEST(SampleTokens, TopKOneIsGreedy) {
  const std::vector<double> row{0.3, -0.2, 2.5, 1.0, 2.4};
  Sampler s({row}, {1.3, 1, 1.0});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.draw(static_cast<uint32_t>(i), i)[0], 2);
}

TEST(SampleTokens, DeterministicInSeedStepAndRow) {
  const std::vector<double> row{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};
  Sampler s({row, row, row}, {1.0, 0, 1.0});
  EXPECT_EQ(s.draw(5, 9), s.draw(5, 9));
  int differ_step = 0, differ_row = 0;
  for (int step = 0; step < 20; ++step) {
    const auto a = s.draw(5, step), b = s.draw(5, step + 1);
    differ_step += a != b;
    differ_row += a[0] != a[1] || a[1] != a[2];
  }
  EXPECT_GT(differ_step, 5);
  EXPECT_GT(differ_row, 5);
}

TEST(SampleTokens, TemperatureFrequencies) {
  // probabilities 0.5, 0.3, 0.2 at temperature 1; temperature 2 takes their square roots.
  const std::vector<double> row = logs({0.2, 0.5, 0.3});
  const int n = 20000;
  expect_distribution(frequencies(row, {1.0, 0, 1.0}, n), {{0, 0.2}, {1, 0.5}, {2, 0.3}}, n);
  const double z = std::sqrt(0.2) + std::sqrt(0.5) + std::sqrt(0.3);
  std::vector<double> doubled;  // 2 log p at temperature 2 is log p at temperature 1
  for (double v : row) doubled.push_back(2.0 * v);
  expect_distribution(frequencies(doubled, {2.0, 0, 1.0}, n), {{0, 0.2}, {1, 0.5}, {2, 0.3}}, n);
  expect_distribution(frequencies(row, {2.0, 0, 1.0}, n),
                      {{0, std::sqrt(0.2) / z}, {1, std::sqrt(0.5) / z}, {2, std::sqrt(0.3) / z}},
                      n);
}

TEST(SampleTokens, TopKThenTopPFrequencies) {
  // Shuffled probabilities 0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02. top_k = 5 keeps 0.95 of the
  // mass: renormalized 0.421, 0.263, 0.158, 0.105, 0.053; top_p = 0.8 then keeps the three
  // largest (0.421 + 0.263 < 0.8 <= 0.842): 0.5, 0.3125, 0.1875.
  const std::vector<double> row = logs({0.05, 0.25, 0.02, 0.4, 0.1, 0.15, 0.03});
  const int n = 20000;
  expect_distribution(frequencies(row, {1.0, 5, 0.8}, n), {{3, 0.5}, {1, 0.3125}, {5, 0.1875}}, n);
  // top_k alone.
  expect_distribution(frequencies(row, {1.0, 2, 1.0}, n), {{3, 0.4 / 0.65}, {1, 0.25 / 0.65}}, n);
  // top_p alone: 0.4 + 0.25 < 0.7 <= 0.8.
  expect_distribution(frequencies(row, {1.0, 0, 0.7}, n),
                      {{3, 0.4 / 0.8}, {1, 0.25 / 0.8}, {5, 0.15 / 0.8}}, n);
}

TEST(SampleTokens, TopPEdgeCases) {
  const std::vector<double> row = logs({0.5, 0.3, 0.2});
  const int n = 2000;
  // Below the largest probability: the largest alone; just above: two tokens.
  expect_distribution(frequencies(row, {1.0, 0, 0.49}, n), {{0, 1.0}}, n);
  expect_distribution(frequencies(row, {1.0, 0, 0.51}, n), {{0, 0.5 / 0.8}, {1, 0.3 / 0.8}}, n);
  // 0 still keeps one token; 1 and more keep all.
  expect_distribution(frequencies(row, {1.0, 0, 0.0}, n), {{0, 1.0}}, n);
  expect_distribution(frequencies(row, {1.0, 0, 1.5}, n), {{0, 0.5}, {1, 0.3}, {2, 0.2}}, n);
  // Ties with the last kept value stay (top_k = 1 over two equal maxima).
  expect_distribution(frequencies({1.0, 0.0, 1.0}, {1.0, 1, 1.0}, n), {{0, 0.5}, {2, 0.5}}, n);
  // top_k of V or more filters nothing.
  expect_distribution(frequencies(row, {1.0, 3, 1.0}, n), {{0, 0.5}, {1, 0.3}, {2, 0.2}}, n);
}

TEST(SampleTokens, BadOperandsAreShapeErrors) {
  Graph g;
  Tensor logits = g.input("logits", {2, 10}), t = g.input("t", {}),
         k = g.input("k", {2}, DType::i32);
  Tensor p = g.input("p", {}), seed = g.input("seed", {}, DType::u32),
         step = g.input("step", {}, DType::i32);
  auto with = [&](int at, Tensor bad) {
    std::vector<Tensor> ops{logits, t, k, p, seed, step};
    ops[static_cast<size_t>(at)] = bad;
    return [ops] { sample_tokens(ops[0], ops[1], ops[2], ops[3], ops[4], ops[5]); };
  };
  expect_shape_error(with(0, g.input("li", {2, 10}, DType::i32)),
                     {"sample_tokens", "float logits"});
  expect_shape_error(with(0, g.input("l1", {10})), {"sample_tokens", "[B, V]"});
  expect_shape_error(with(1, g.input("t3", {3})), {"sample_tokens", "temperature", "[B] = [2]"});
  expect_shape_error(with(2, g.input("kf", {2})), {"sample_tokens", "i32 top_k"});
  expect_shape_error(with(3, g.input("pi", {}, DType::i32)), {"sample_tokens", "float top_p"});
  expect_shape_error(with(4, g.input("sf", {})), {"sample_tokens", "seed"});
  expect_shape_error(with(5, g.input("s2", {2}, DType::i32)), {"sample_tokens", "step"});
}

}  // namespace
}  // namespace mn
