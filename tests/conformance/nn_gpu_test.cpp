// GPU behaviour of the nn-family kernels beyond the op table's samples, whose small shapes take
// the thread-per-row paths: rows walked by a workgroup (values held in registers, or reloaded
// for long rows), strided softmax axes, few long rows split into chunks, batch_norm on [N, C]
// and on images, the exact dropout mask on many elements, and NaN/-inf rows.
#include <cmath>

#include <gtest/gtest.h>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "gpu_compare.h"
#include "lowering_runner.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using testing::expect_close;
using testing::run_gpu;

// An input x of `shape` with random values in [lo, hi), fed under "x".
Tensor random_input(Graph& g, reference::Feeds& feeds, const std::string& name, const Shape& shape,
                    std::mt19937_64& rng, double lo = -2.0, double hi = 2.0) {
  feeds[name] = testing::random_array(rng, {shape, DType::f32}, lo, hi);
  return g.input(name, shape);
}

void check_softmaxes(const Shape& shape, int64_t axis, const std::string& seed) {
  auto rng = testing::rng_for("nn-gpu/" + seed);
  Graph g;
  reference::Feeds feeds;
  Tensor x = random_input(g, feeds, "x", shape, rng, -4.0, 4.0);
  g.output("softmax", softmax(x, axis));
  g.output("log_softmax", log_softmax(x, axis));
  expect_close(g, feeds);
}

TEST(NnGpu, SoftmaxWorkgroupRows) {
  check_softmaxes({3, 100}, -1, "softmax-cached");  // lanes hold their values in registers
  check_softmaxes({2, 5000}, -1, "softmax-long");   // too long to hold: reloaded per pass
}

TEST(NnGpu, SoftmaxStridedAxes) {
  check_softmaxes({4, 40, 3}, 1, "softmax-strided-group");     // few rows: a workgroup each
  check_softmaxes({2, 20, 300}, 1, "softmax-strided-thread");  // many rows: a thread each
}

TEST(NnGpu, SoftmaxSplitRows) {
  check_softmaxes({2, 20000}, -1, "softmax-split");
  check_softmaxes({20000, 2}, 0, "softmax-split-strided");
}

// Row maxima that are -inf (every element) or rows holding NaN: NaN rows, as the reference.
TEST(NnGpu, SoftmaxInfiniteRows) {
  for (int64_t n : {5, 100, 20000}) {
    SCOPED_TRACE(n);
    Graph g;
    Array v({3, n}, DType::f32);
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      v.data[j] = -inf;                                      // all -inf: NaN
      v.data[n + j] = j == 1 ? 0.5 : -inf;                   // one finite value: 1 there
      v.data[2 * n + j] = j == 0 ? std::nan("") : j * 1e-3;  // a NaN: NaN
    }
    Tensor x = g.input("x", {3, n});
    g.output("softmax", softmax(x, -1));
    g.output("log_softmax", log_softmax(x, -1));
    reference::Feeds feeds{{"x", v}};
    auto got = run_gpu(g, feeds);
    const Array& s = got.at("softmax");
    const Array& ls = got.at("log_softmax");
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isnan(s.data[j]) && std::isnan(ls.data[j])) << j;
      EXPECT_EQ(s.data[n + j], j == 1 ? 1.0 : 0.0) << j;
      EXPECT_EQ(ls.data[n + j], j == 1 ? 0.0 : -inf) << j;
      EXPECT_TRUE(std::isnan(s.data[2 * n + j]) && std::isnan(ls.data[2 * n + j])) << j;
    }
  }
}

void check_norms(const Shape& shape, int64_t dims, const std::string& seed) {
  auto rng = testing::rng_for("nn-gpu/" + seed);
  Graph g;
  reference::Feeds feeds;
  // A large mean: the two-pass variance must not cancel.
  Tensor x = random_input(g, feeds, "x", shape, rng, 50.0, 54.0);
  const Shape trailing(shape.end() - dims, shape.end());
  Tensor gamma = random_input(g, feeds, "gamma", trailing, rng, 0.5, 1.5);
  Tensor beta = random_input(g, feeds, "beta", trailing, rng, -1.0, 1.0);
  g.output("layer_norm", layer_norm(x, gamma, beta, dims));
  g.output("rms_norm", rms_norm(x, gamma, 1e-6, dims));
  g.output("layer_norm_plain", layer_norm(x, {}, {}, dims));
  expect_close(g, feeds);
}

TEST(NnGpu, NormWorkgroupRows) {
  check_norms({5, 300}, 1, "norm-cached");
  check_norms({3, 9, 700}, 2, "norm-long");
}

TEST(NnGpu, NormSplitRows) { check_norms({2, 30000}, 1, "norm-split"); }

TEST(NnGpu, GroupNormLargeGroups) {
  auto rng = testing::rng_for("nn-gpu/group-norm");
  Graph g;
  reference::Feeds feeds;
  Tensor x = random_input(g, feeds, "x", {2, 6, 12, 12}, rng, -3.0, 5.0);
  Tensor gamma = random_input(g, feeds, "gamma", {6}, rng, 0.5, 1.5);
  Tensor beta = random_input(g, feeds, "beta", {6}, rng, -1.0, 1.0);
  g.output("gn", group_norm(x, 3, gamma, beta));
  Tensor big = random_input(g, feeds, "big", {1, 4, 100, 100}, rng, -3.0, 5.0);
  g.output("gn_split", group_norm(big, 2, {}, {}));
  expect_close(g, feeds);
}

void check_batch_norm(const Shape& shape, const std::string& seed) {
  auto rng = testing::rng_for("nn-gpu/" + seed);
  Graph g;
  reference::Feeds feeds;
  Tensor x = random_input(g, feeds, "x", shape, rng, 1.0, 5.0);
  const Shape c{shape[1]};
  Tensor gamma = random_input(g, feeds, "gamma", c, rng, 0.5, 1.5);
  Tensor beta = random_input(g, feeds, "beta", c, rng, -1.0, 1.0);
  Tensor rm = random_input(g, feeds, "rm", c, rng, -0.5, 0.5);
  Tensor rv = random_input(g, feeds, "rv", c, rng, 0.5, 1.5);
  g.output("train", batch_norm(x, gamma, beta, {}, {}, true).y);
  g.output("train_plain", batch_norm(x, {}, {}, {}, {}, true).y);
  g.output("eval", batch_norm(x, gamma, beta, rm, rv, false).y);
  Tensor y = batch_norm(x, gamma, beta, {}, {}, true).y;
  Tensor w = g.constant(testing::random_array(rng, {shape, DType::f32}));
  auto grads = gradients(sum(y * w), {x, gamma, beta});
  g.output("grad_x", grads[0]);
  g.output("grad_gamma", grads[1]);
  g.output("grad_beta", grads[2]);
  expect_close(g, feeds);
}

TEST(NnGpu, BatchNormShapes) {
  check_batch_norm({64, 300}, "bn-features");          // [N, C]: a thread per channel
  check_batch_norm({3, 5, 20, 20}, "bn-image");        // runs of 400: a workgroup per channel
  check_batch_norm({8, 2, 64, 64}, "bn-image-split");  // few channels: chunked statistics
}

// The mask is the reference's exactly: compare zeros and kept values element by element.
TEST(NnGpu, DropoutMaskExact) {
  for (double p : {0.1, 0.5, 0.999}) {
    SCOPED_TRACE(p);
    Graph g;
    Tensor x = g.input("x", {300, 257});
    g.output("y", dropout(x, p, 0x123456789abcdefULL + static_cast<uint64_t>(p * 1000), true));
    Array ones({300, 257}, DType::f32);
    for (double& v : ones.data) v = 1.0;
    reference::Feeds feeds{{"x", ones}};
    auto want = reference::evaluate(g, feeds).at("y");
    auto got = run_gpu(g, feeds).at("y");
    int64_t mismatches = 0, kept = 0;
    for (size_t i = 0; i < want.data.size(); ++i) {
      mismatches += (want.data[i] == 0.0) != (got.data[i] == 0.0);
      kept += want.data[i] != 0.0;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(want.numel()), 1.0 - p, 0.01);
    EXPECT_TRUE(testing::elementwise_near(got, want, 2e-6));
  }
}

// Large positions: the angle's fraction of a turn is taken exactly, so f32 keeps up with the
// float64 reference.
TEST(NnGpu, RopeLargePositions) {
  auto rng = testing::rng_for("nn-gpu/rope");
  Graph g;
  reference::Feeds feeds;
  Tensor x = random_input(g, feeds, "x", {2, 3, 64, 128}, rng);
  g.output("near", rope(x, 10000.0, 0));
  g.output("far", rope(x, 10000.0, 200000));
  g.output("negative", rope(x, 500000.0, -70));
  Tensor w = g.constant(testing::random_array(rng, {{2, 3, 64, 128}, DType::f32}));
  g.output("grad", gradients(sum(rope(x, 10000.0, 100000) * w), {x})[0]);
  // Heads too wide for the frequency table in shared memory.
  Tensor wide = random_input(g, feeds, "wide_x", {3, 1040}, rng);
  g.output("wide", rope(wide, 10000.0, 3000));
  expect_close(g, feeds, 5e-6);
}

// The f32 kernels' forms at f32's agreement: on a tensor-core device prompts with heads of
// multiples of 16 would take the f16-operand kernel instead, which
// tests/tensor_cores/coop_attention_gpu_test.cpp checks against its own bound.
void check_attention(const Shape& q, const Shape& k, const Shape& v, const Shape& mask, bool causal,
                     const std::string& seed) {
  testing::ScopedEnv f32_kernels("MN_COOP_ATTENTION", "0");
  auto rng = testing::rng_for("nn-gpu/" + seed);
  Graph g;
  reference::Feeds feeds;
  Tensor tq = random_input(g, feeds, "q", q, rng, -1.0, 1.0);
  Tensor tk = random_input(g, feeds, "k", k, rng, -1.0, 1.0);
  Tensor tv = random_input(g, feeds, "v", v, rng, -1.0, 1.0);
  Tensor tm;
  if (!mask.empty()) tm = random_input(g, feeds, "mask", mask, rng, -2.0, 2.0);
  Tensor out = scaled_dot_product_attention(tq, tk, tv, tm, causal);
  g.output("out", out);
  Tensor w = g.constant(testing::random_array(rng, out.type()));
  auto grads = gradients(sum(out * w), {tq, tk, tv});
  for (size_t i = 0; i < grads.size(); ++i) g.output("grad" + std::to_string(i), grads[i]);
  expect_close(g, feeds);
}

TEST(NnGpu, AttentionManyKeys) {
  // Several blocks of keys, the online softmax rescaling across them.
  check_attention({1, 2, 7, 16}, {1, 2, 150, 16}, {1, 2, 150, 24}, {}, false, "attn-keys");
  check_attention({1, 4, 130, 8}, {1, 2, 130, 8}, {1, 2, 130, 8}, {130, 130}, true,
                  "attn-causal-gqa");
}

TEST(NnGpu, AttentionQueryTiles) {
  // Tiles of query rows sharing each block of keys: partial tiles and blocks, broadcast batch
  // and mask axes, causal masks with more or fewer queries than keys.
  check_attention({2, 1, 2, 21, 8}, {1, 3, 2, 75, 8}, {1, 3, 2, 75, 5}, {1, 21, 75}, false,
                  "attn-tiles-broadcast");
  check_attention({1, 2, 40, 16}, {1, 2, 24, 16}, {1, 2, 24, 16}, {}, true, "attn-tiles-causal");
  check_attention({1, 2, 20, 16}, {1, 1, 90, 16}, {1, 1, 90, 40}, {2, 20, 90}, true,
                  "attn-tiles-causal-long-keys");
  check_attention({1, 2, 33, 64}, {1, 2, 33, 64}, {1, 2, 33, 64}, {}, false, "attn-tiles-d64");
}

// Prompt-sized queries with values of 64 columns take the register-tiled kernel (4 x 4 scores a
// lane over blocks of 64 keys): partial query tiles and key blocks, grouped heads, causal masks
// with as many and with more keys than queries, broadcast and per-row additive masks, 128 value
// columns where they fit.
TEST(NnGpu, AttentionRegisterTiles) {
  struct Case {
    Shape q, k, v, mask;
    bool causal;
    std::string seed;
  };
  const std::vector<Case> cases = {
      {{1, 4, 70, 8}, {1, 2, 70, 8}, {1, 2, 70, 64}, {}, true, "attn-reg-causal-gqa"},
      {{2, 2, 33, 12}, {2, 2, 150, 12}, {2, 2, 150, 64}, {2, 1, 33, 150}, false, "attn-reg-mask"},
      {{1, 1, 40, 4}, {1, 1, 130, 4}, {1, 1, 130, 64}, {130}, true, "attn-reg-long-keys"},
      {{3, 96, 4}, {3, 96, 4}, {3, 96, 128}, {}, true, "attn-reg-wide-values"},
  };
  const codegen::DeviceTraits traits = testing::device_traits();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.seed);
    Graph g;
    Tensor q = g.input("q", c.q), k = g.input("k", c.k), v = g.input("v", c.v);
    Tensor mask = c.mask.empty() ? Tensor{} : g.input("mask", c.mask);
    Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal);
    const auto low = testing::lower_node(g, out.id(), traits);
    ASSERT_EQ(low.launches.size(), 1u);
    // 128 value columns stage 46 KB in shared memory: lavapipe's 32 KiB take the scalar tiles.
    const bool fits = c.v.back() == 64 || traits.max_shared_bytes >= 48 * 1024;
    EXPECT_EQ(low.launches[0].name, fits ? "attention_tiled_registers" : "attention_tiled");
    check_attention(c.q, c.k, c.v, c.mask, c.causal, c.seed);
  }
}

TEST(NnGpu, AttentionWideValues) {
  // More value columns than lanes: each lane accumulates several.
  check_attention({2, 3, 16}, {2, 5, 16}, {2, 5, 700}, {2, 3, 5}, false, "attn-wide");
}

// -inf mask entries weigh nothing; a fully masked row is NaN, as the reference. Rows of 3
// queries take the per-row kernel (with 600 keys, split into ranges), 12 the tiled one, 40
// with 64 value columns the register-tiled one.
TEST(NnGpu, AttentionMaskedKeys) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    int64_t lq, lk, dv;
  };
  for (auto [lq, lk, dv] : {Case{3, 70, 2}, Case{12, 70, 2}, Case{3, 600, 2}, Case{40, 70, 64}}) {
    SCOPED_TRACE(std::to_string(lq) + " queries, " + std::to_string(lk) + " keys");
    Graph g;
    Tensor q = g.input("q", {1, lq, 4}), k = g.input("k", {1, lk, 4}), v = g.input("v", {1, lk, dv});
    Tensor mask = g.input("mask", {lq, lk});
    g.output("out", scaled_dot_product_attention(q, k, v, mask, false));
    auto rng = testing::rng_for("nn-gpu/attn-masked");
    reference::Feeds feeds{{"q", testing::random_array(rng, {{1, lq, 4}, DType::f32})},
                           {"k", testing::random_array(rng, {{1, lk, 4}, DType::f32})},
                           {"v", testing::random_array(rng, {{1, lk, dv}, DType::f32})}};
    Array m({lq, lk}, DType::f32);
    for (int64_t i = 0; i < lq; ++i) {
      for (int64_t j = 0; j < lk; ++j) {
        double& x = m.data[i * lk + j];
        if (i % 3 == 0) x = j % 3 == 0 ? 0.0 : -inf;  // every third key
        if (i % 3 == 1) x = -inf;                     // none: NaN
        if (i % 3 == 2) x = j < lk - 4 ? -inf : 0.0;  // only the last keys
      }
    }
    feeds["mask"] = m;
    auto want = reference::evaluate(g, feeds).at("out");
    auto got = run_gpu(g, feeds).at("out");
    for (int64_t i = 0; i < lq * dv; ++i) {
      if (i / dv % 3 == 1) {
        EXPECT_TRUE(std::isnan(got.data[i]) && std::isnan(want.data[i])) << i;
      } else {
        EXPECT_NEAR(got.data[i], want.data[i], 2e-6) << i;
      }
    }
  }
}

// Few query rows over many keys: the keys split into ranges combined by a second kernel,
// including ranges a causal mask leaves empty.
TEST(NnGpu, AttentionDecodeSplitKeys) {
  check_attention({1, 2, 1, 16}, {1, 2, 1000, 16}, {1, 2, 1000, 8}, {}, false, "attn-decode");
  check_attention({2, 4, 2, 8}, {2, 1, 600, 8}, {2, 1, 600, 8}, {2, 1, 2, 600}, false,
                  "attn-decode-gqa-mask");
  check_attention({1, 1, 3, 8}, {1, 1, 700, 8}, {1, 1, 700, 8}, {}, true, "attn-decode-causal");
}

}  // namespace
}  // namespace mn
