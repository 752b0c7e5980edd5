// GPU behaviour of the inference ops beyond the op table's samples: rope_positions against rope
// at the same positions and at Llama 3.1 sizes with large positions; cached_attention decoding
// (Lq = 1) at several positions of a large cache whose slots past the positions hold NaN (a
// kernel that read them would turn its output NaN), right-padded prefill through the tiled
// kernel, grouped-query heads; sample_tokens equal to the reference over many (seed, step) pairs
// of one recorded session, per-row parameters, greedy on a Qwen-sized vocabulary.
#include <cmath>
#include <limits>

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

namespace mn {
namespace {

using testing::expect_close;
using testing::expect_same_values;
using testing::run_gpu;

Tensor random_input(Graph& g, reference::Feeds& feeds, const std::string& name, const Shape& shape,
                    std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  feeds[name] = testing::random_array(rng, {shape, DType::f32}, lo, hi);
  return g.input(name, shape);
}
Tensor int_input(Graph& g, reference::Feeds& feeds, const std::string& name, const Shape& shape,
                 std::vector<double> values) {
  feeds[name] = Array(shape, DType::i32, std::move(values));
  return g.input(name, shape, DType::i32);
}

// ---- rope_positions ----

TEST(InferenceGpu, RopePositionsEqualsRopeAtOffsets) {
  auto rng = testing::rng_for("inference-gpu/rope-offsets");
  Graph g;
  reference::Feeds feeds;
  Tensor x = random_input(g, feeds, "x", {2, 3, 6, 16}, rng, -2.0, 2.0);
  std::vector<double> p;
  for (int i = 0; i < 6; ++i) p.push_back(1000 + i);
  Tensor pos = int_input(g, feeds, "pos", {6}, p);
  g.output("at_positions", rope_positions(x, pos, 10000.0));
  g.output("at_offset", rope(x, 10000.0, 1000));
  auto got = run_gpu(g, feeds);
  EXPECT_TRUE(testing::elementwise_near(got.at("at_positions"), got.at("at_offset"), 2e-6));
  expect_close(g, feeds);
}

TEST(InferenceGpu, RopePositionsLlama3LargePositions) {
  auto rng = testing::rng_for("inference-gpu/rope-llama3");
  Graph g;
  reference::Feeds feeds;
  Tensor x = random_input(g, feeds, "x", {2, 4, 3, 128}, rng, -2.0, 2.0);
  Tensor pos = int_input(g, feeds, "pos", {2, 1, 3}, {0, 1, 8191, 30000, 100000, 131071});
  Tensor y = rope_positions(x, pos, 500000.0, Llama3RopeScaling{});
  g.output("y", y);
  g.output("dx", gradients(sum(y * y.graph().constant(
                                       testing::random_array(rng, {{2, 4, 3, 128}, DType::f32}))),
                           {x})[0]);
  expect_close(g, feeds);
}

// ---- cached_attention ----

// Decoding one token per sequence at positions spread over a 2048-slot cache (the row kernel
// splits the keys over several workgroups and combines them; a negative position sees no key),
// for few rows (a small grid: the first block's loads issued before the visible length is
// known) and many (a large one: loads wait for it). Cache slots past every position are NaN on
// the GPU and zero in the reference, which never reads them either.
TEST(InferenceGpu, CachedAttentionDecodeReadsOnlyVisibleKeys) {
  for (const auto& [B, Hq] : {std::pair<int64_t, int64_t>{4, 4}, {16, 8}}) {
    SCOPED_TRACE(::testing::Message() << "batch " << B << " heads " << Hq);
    auto rng = testing::rng_for("inference-gpu/decode");
    const int64_t Hkv = 2, T = 2048, D = 16;
    std::vector<double> positions;
    for (int64_t b = 0; b < B; ++b) {
      const double spread[] = {-1, 5, 256, 1500};  // -1: an empty sequence, output 0
      positions.push_back(spread[b % 4] + static_cast<double>(b / 4) * 100);
    }
    Graph g;
    reference::Feeds feeds;
    Tensor q = random_input(g, feeds, "q", {B, Hq, 1, D}, rng);
    Tensor k = random_input(g, feeds, "k", {B, Hkv, T, D}, rng);
    Tensor v = random_input(g, feeds, "v", {B, Hkv, T, D}, rng);
    Tensor pos = int_input(g, feeds, "pos", {B, 1, 1}, positions);
    g.output("out", cached_attention(q, k, v, pos));
    reference::Feeds poisoned = feeds;
    for (const char* name : {"k", "v"}) {
      Array& cache = poisoned[name];
      Array& zeroed = feeds[name];
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < Hkv; ++h) {
          for (auto j = std::max<int64_t>(0, static_cast<int64_t>(positions[b]) + 1); j < T; ++j) {
            for (int64_t e = 0; e < D; ++e) {
              const int64_t at = ((b * Hkv + h) * T + j) * D + e;
              cache.data[at] = std::numeric_limits<double>::quiet_NaN();
              zeroed.data[at] = 0.0;
            }
          }
        }
      }
    }
    const Array want = reference::evaluate(g, feeds).at("out");
    const Array got = run_gpu(g, poisoned).at("out");
    EXPECT_TRUE(testing::elementwise_near(got, want, 2e-5));
  }
}

// A cache longer than 1024 blocks of keys (heads of 8 take blocks of 256 keys: 32 streams of
// two lanes, 8 keys a lane): the grid has 1024 workgroups a row, each walks several blocks (the
// online softmax rescaling what it summed before), and the last combines the busy ones' partials.
TEST(InferenceGpu, CachedAttentionDecodeOverSeveralBlocksPerWorkgroup) {
  auto rng = testing::rng_for("inference-gpu/decode-long");
  const int64_t T = 1100 * 512, D = 8;
  Graph g;
  reference::Feeds feeds;
  Tensor q = random_input(g, feeds, "q", {1, 2, 1, D}, rng, -3.0, 3.0);
  Tensor k = random_input(g, feeds, "k", {1, 1, T, D}, rng, -3.0, 3.0);
  Tensor v = random_input(g, feeds, "v", {1, 1, T, D}, rng);
  Tensor pos = int_input(g, feeds, "pos", {1, 2, 1}, {T - 1, 300000});
  Tensor out = cached_attention(q, k, v, pos);
  g.output("out", out);
  const auto low = testing::lower_node(g, out.id(), testing::device_traits());
  ASSERT_EQ(low.launches.size(), 1u);
  if (low.launches[0].name.find("+streams") != std::string::npos) {
    // 1024 partials of (max, sum, D values) for each of the two rows.
    ASSERT_EQ(low.scratch_bytes.size(), 1u);
    EXPECT_EQ(low.scratch_bytes[0], 2u * 1024u * (2u + D) * sizeof(float));
  }
  expect_close(g, feeds);
}

// The row kernel's head widths, run as lowered with the tensor-core attention kernels off (on
// devices with them, attention without positions would take those): keys and values of
// different widths (a stream's lanes then hold several value quads, or some hold none), wide
// heads, a few query rows with a mask and a causal prefix, keys split over workgroups (300 of
// them) and 16-bit caches read by cached_attention.
TEST(InferenceGpu, AttentionRowKernelHeadWidths) {
  struct Case {
    int64_t d, dv, lq;
    bool mask, causal;
    DType cache;
  };
  codegen::DeviceTraits traits = testing::device_traits();
  traits.tensor_attention = false;
  traits.coop_attention = codegen::DeviceTraits::Choice::never;
  for (const Case& c :
       {Case{16, 64, 1, false, false, DType::f32}, Case{64, 16, 1, true, false, DType::f32},
        Case{128, 128, 3, false, true, DType::f32}, Case{8, 8, 2, true, true, DType::f32},
        Case{64, 64, 1, false, false, DType::bf16}, Case{32, 32, 2, false, false, DType::f16}}) {
    SCOPED_TRACE(::testing::Message()
                 << "d " << c.d << " dv " << c.dv << " lq " << c.lq << " " << dtype_name(c.cache));
    auto rng = testing::rng_for("inference-gpu/row-widths");
    const int64_t T = 300;
    Graph g;
    reference::Feeds feeds;
    Tensor q = random_input(g, feeds, "q", {2, 4, c.lq, c.d}, rng, -2.0, 2.0);
    feeds["k"] = testing::random_array(rng, {{2, 2, T, c.d}, c.cache}, -2.0, 2.0);
    feeds["v"] = testing::random_array(rng, {{2, 2, T, c.dv}, c.cache});
    Tensor k = g.input("k", {2, 2, T, c.d}, c.cache);
    Tensor v = g.input("v", {2, 2, T, c.dv}, c.cache);
    std::vector<Array> inputs{feeds["q"], feeds["k"], feeds["v"]};
    Tensor out;
    if (c.cache != DType::f32) {  // cached_attention reads 16-bit caches beside an f32 query
      std::vector<double> p;
      for (int64_t i = 0; i < 2 * c.lq; ++i) p.push_back(static_cast<double>(T - 40 + 17 * i));
      out = cached_attention(q, k, v, int_input(g, feeds, "pos", {2, 1, c.lq}, p));
      inputs.push_back(feeds["pos"]);
    } else {
      Tensor mask;
      if (c.mask) {
        mask = random_input(g, feeds, "mask", {1, 4, c.lq, T}, rng, -3.0, 0.0);
        inputs.push_back(feeds["mask"]);
      }
      out = scaled_dot_product_attention(q, k, v, mask, c.causal);
    }
    g.output("out", out);
    const auto low = testing::lower_node(g, out.id(), traits);
    ASSERT_EQ(low.launches.size(), 1u);
    if (traits.subgroup_shuffle)
      EXPECT_NE(low.launches[0].name.find("+streams"), std::string::npos);
    const Array want = reference::evaluate(g, feeds).at("out");
    const Array got = testing::run_lowering(g, out.id(), inputs, traits);
    EXPECT_TRUE(testing::elementwise_near(got, want, 3e-5)) << low.launches[0].name;
  }
}

// The decode kernel scoring a key/value head's whole group of query heads in one workgroup
// (DeviceTraits::decode_attention_groups, MN_ATTENTION_DECODE_GROUPS=1; off by default): groups
// of 2, 3 and 4 heads, caches short enough for one workgroup a group and long enough to split
// (the last workgroup combining every head of the group), 16-bit caches, slots past the
// positions NaN, a sequence at position -1; positions given per head (not grouped) and the
// switch off give the same values ungrouped.
TEST(InferenceGpu, CachedAttentionDecodeGroupsOfHeads) {
  struct Case {
    int64_t hq, hkv, d, t;
    DType cache;
    bool per_head, grouped;
  };
  for (const Case& c :
       {Case{4, 2, 16, 40, DType::f32, false, true}, Case{9, 3, 64, 700, DType::f32, false, true},
        Case{8, 2, 64, 300, DType::bf16, false, true},
        Case{6, 2, 32, 1500, DType::f16, false, true},
        Case{4, 2, 16, 300, DType::f32, true, false}}) {
    for (const bool on : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << c.hq << "/" << c.hkv << " heads of " << c.d << ", " << c.t << " slots, "
                   << dtype_name(c.cache) << (c.per_head ? ", positions per head" : "")
                   << (on ? "" : ", switched off"));
      codegen::DeviceTraits traits = testing::device_traits();
      traits.decode_attention_groups = on;
      auto rng = testing::rng_for("inference-gpu/decode-groups");
      const int64_t B = 3;
      const std::vector<double> at{-1, static_cast<double>(c.t / 3), static_cast<double>(c.t - 1)};
      std::vector<double> positions;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < (c.per_head ? c.hq : 1); ++h) positions.push_back(at[b] - (h % 2));
      }
      Graph g;
      reference::Feeds feeds;
      Tensor q = random_input(g, feeds, "q", {B, c.hq, 1, c.d}, rng, -2.0, 2.0);
      feeds["k"] = testing::random_array(rng, {{B, c.hkv, c.t, c.d}, c.cache}, -2.0, 2.0);
      feeds["v"] = testing::random_array(rng, {{B, c.hkv, c.t, c.d}, c.cache});
      Tensor k = g.input("k", {B, c.hkv, c.t, c.d}, c.cache);
      Tensor v = g.input("v", {B, c.hkv, c.t, c.d}, c.cache);
      Tensor pos = int_input(g, feeds, "pos", {B, c.per_head ? c.hq : 1, 1}, positions);
      Tensor out = cached_attention(q, k, v, pos);
      g.output("out", out);
      // What no query sees is NaN on the device and zero in the reference.
      reference::Feeds poisoned = feeds;
      for (const char* name : {"k", "v"}) {
        for (int64_t b = 0; b < B; ++b) {
          const auto last = static_cast<int64_t>(at[b]);
          for (int64_t h = 0; h < c.hkv; ++h) {
            for (auto j = std::max<int64_t>(0, last + 1); j < c.t; ++j) {
              for (int64_t e = 0; e < c.d; ++e) {
                const int64_t i = ((b * c.hkv + h) * c.t + j) * c.d + e;
                poisoned[name].data[i] = std::numeric_limits<double>::quiet_NaN();
                feeds[name].data[i] = 0.0;
              }
            }
          }
        }
      }
      const auto low = testing::lower_node(g, out.id(), traits);
      ASSERT_EQ(low.launches.size(), 1u);
      const std::string heads = "+heads[" + std::to_string(c.hq / c.hkv) + "]";
      if (traits.subgroup_shuffle) {
        EXPECT_EQ(low.launches[0].name.find(heads) != std::string::npos, on && c.grouped)
            << low.launches[0].name;
      }
      const Array want = reference::evaluate(g, feeds).at("out");
      const Array got = testing::run_lowering(
          g, out.id(), {poisoned["q"], poisoned["k"], poisoned["v"], poisoned["pos"]}, traits);
      EXPECT_TRUE(testing::elementwise_near(got, want, 3e-5)) << low.launches[0].name;
    }
  }
}

// Right-padded prompts of lengths 24 and 17 prefilled at once (the tiled kernel): the padding
// queries of the second sit at position -1 and give 0. The first equals causal attention.
TEST(InferenceGpu, CachedAttentionPrefillRightPadded) {
  auto rng = testing::rng_for("inference-gpu/prefill");
  const int64_t L = 24, T = 40;
  Graph g;
  reference::Feeds feeds;
  Tensor q = random_input(g, feeds, "q", {2, 6, L, 8}, rng);
  Tensor k = random_input(g, feeds, "k", {2, 3, T, 8}, rng);
  Tensor v = random_input(g, feeds, "v", {2, 3, T, 8}, rng);
  std::vector<double> p;
  for (int64_t i = 0; i < L; ++i) p.push_back(static_cast<double>(i));
  for (int64_t i = 0; i < L; ++i) p.push_back(i < 17 ? static_cast<double>(i) : -1.0);
  Tensor pos = int_input(g, feeds, "pos", {2, 1, L}, p);
  Tensor out = cached_attention(q, k, v, pos);
  g.output("out", out);
  g.output("causal",
           scaled_dot_product_attention(slice(q, 0, 0, 1), slice(slice(k, 0, 0, 1), 2, 0, L),
                                        slice(slice(v, 0, 0, 1), 2, 0, L), {}, true));
  auto got = run_gpu(g, feeds);
  expect_close(g, feeds);
  const Array& o = got.at("out");
  const Array& c = got.at("causal");
  for (int64_t i = 0; i < c.numel(); ++i) EXPECT_NEAR(o.data[i], c.data[i], 2e-6) << i;
  const int64_t row = 8;  // values per query row
  for (int64_t h = 0; h < 6; ++h) {
    for (int64_t i = 17; i < L; ++i) {
      for (int64_t e = 0; e < row; ++e) EXPECT_EQ(o.data[((6 + h) * L + i) * row + e], 0.0);
    }
  }
}

// A prompt prefilled through the register-tiled kernel (40 queries, values of 64 columns) into
// caches of 100 slots: the first sequence continuing at position 50 (its rows see two key
// blocks), the second at position 10
// and right-padded after 27 tokens (position -1: output 0). Slots past each sequence's last
// position hold NaN on the GPU (zero in the reference): the kernel stages them with the key
// block but must never weigh them.
TEST(InferenceGpu, CachedAttentionPrefillRegisterTiles) {
  auto rng = testing::rng_for("inference-gpu/prefill-registers");
  const int64_t B = 2, Hq = 4, Hkv = 2, L = 40, T = 100, D = 8, DV = 64;
  Graph g;
  reference::Feeds feeds;
  Tensor q = random_input(g, feeds, "q", {B, Hq, L, D}, rng);
  Tensor k = random_input(g, feeds, "k", {B, Hkv, T, D}, rng);
  Tensor v = random_input(g, feeds, "v", {B, Hkv, T, DV}, rng);
  std::vector<double> p;
  for (int64_t i = 0; i < L; ++i) p.push_back(static_cast<double>(50 + i));
  for (int64_t i = 0; i < L; ++i) p.push_back(i < 27 ? static_cast<double>(10 + i) : -1.0);
  const int64_t last[B] = {50 + L - 1, 36};
  Tensor pos = int_input(g, feeds, "pos", {B, 1, L}, p);
  Tensor out = cached_attention(q, k, v, pos);
  g.output("out", out);
  const auto low = testing::lower_node(g, out.id(), testing::device_traits());
  ASSERT_EQ(low.launches.size(), 1u);
  EXPECT_EQ(low.launches[0].name, "attention_tiled_registers");
  reference::Feeds poisoned = feeds;
  for (const auto& [name, width] : {std::pair{"k", D}, std::pair{"v", DV}}) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < Hkv; ++h) {
        for (int64_t j = last[b] + 1; j < T; ++j) {
          for (int64_t e = 0; e < width; ++e) {
            const int64_t at = ((b * Hkv + h) * T + j) * width + e;
            poisoned[name].data[at] = std::numeric_limits<double>::quiet_NaN();
            feeds[name].data[at] = 0.0;
          }
        }
      }
    }
  }
  const Array want = reference::evaluate(g, feeds).at("out");
  const Array got = run_gpu(g, poisoned).at("out");
  EXPECT_TRUE(testing::elementwise_near(got, want, 2e-5));
  for (int64_t h = 0; h < Hq; ++h) {
    for (int64_t i = 27; i < L; ++i) {
      for (int64_t e = 0; e < DV; ++e) EXPECT_EQ(got.data[((Hq + h) * L + i) * DV + e], 0.0);
    }
  }
}

// ---- sample_tokens ----

struct SamplingGraph {
  Graph g;
  reference::Feeds feeds;
  SamplingGraph(Array logits, Array t, Array k, Array p) {
    const Shape shape = logits.shape;
    feeds["logits"] = std::move(logits);
    feeds["t"] = t;
    feeds["k"] = k;
    feeds["p"] = p;
    g.output("tokens",
             sample_tokens(g.input("logits", shape, feeds["logits"].dtype), g.input("t", t.shape),
                           g.input("k", k.shape, DType::i32), g.input("p", p.shape),
                           g.input("seed", {}, DType::u32), g.input("step", {}, DType::u32)));
  }
};

// One recorded session serves every (seed, step): only the scalar inputs change.
void expect_reference_draws(SamplingGraph& s, int seeds, int steps) {
  auto session = build_session(s.g);
  for (const auto& [name, value] : s.feeds) session->set(name, value);
  for (int seed = 0; seed < seeds; ++seed) {
    for (int step = 0; step < steps; ++step) {
      s.feeds["seed"] = Array({}, DType::u32, {1000.0 * seed + 17});
      s.feeds["step"] = Array({}, DType::u32, {static_cast<double>(step)});
      session->set("seed", s.feeds["seed"]);
      session->set("step", s.feeds["step"]);
      session->step();
      expect_same_values(session->get("tokens"), reference::evaluate(s.g, s.feeds).at("tokens"),
                         "seed " + std::to_string(seed) + " step " + std::to_string(step));
    }
  }
}

TEST(InferenceGpu, SampleTokensPerRowParametersMatchReference) {
  auto rng = testing::rng_for("inference-gpu/sample-rows");
  SamplingGraph s(testing::random_array(rng, {{5, 700}, DType::f32}, -6.0, 6.0),
                  Array({5}, DType::f32, {0.0, 0.7, 1.0, 1.3, 1.0}),
                  Array({5}, DType::i32, {3, 0, 40, 1, 700}),
                  Array({5}, DType::f32, {0.9, 0.8, 1.0, 0.5, 0.3}));
  expect_reference_draws(s, 3, 8);
}

TEST(InferenceGpu, SampleTokensVocabularyOfQwenSize) {
  auto rng = testing::rng_for("inference-gpu/sample-qwen");
  SamplingGraph s(testing::random_array(rng, {{2, 151936}, DType::f16}, -10.0, 10.0),
                  Array({}, DType::f32, {0.8}), Array({}, DType::i32, {50}),
                  Array({}, DType::f32, {0.95}));
  expect_reference_draws(s, 1, 2);
  SamplingGraph greedy(s.feeds["logits"], Array({}, DType::f32, {0.0}), Array({}, DType::i32, {0}),
                       Array({}, DType::f32, {1.0}));
  expect_reference_draws(greedy, 1, 1);
}

}  // namespace
}  // namespace mn
