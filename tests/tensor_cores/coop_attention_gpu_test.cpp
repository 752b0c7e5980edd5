// The tensor-core attention kernels (codegen/lower_attention_coop.cpp, and with
// MN_TENSOR_ATTENTION=1 codegen/lower_attention_tensor.cpp's, whose probabilities are bf16 where
// its operands are) run in sessions on the device against float64: causal grouped-query heads over
// partial tiles and key blocks, head sizes 16 to 128 with values of other widths, additive masks
// (per row, broadcast, -inf keys, fully masked rows), scores growing from block to block (the
// outputs rescaled), a 1024-patch vision prompt, a cache prefill at per-row positions whose
// unwritten slots hold NaN, f16 and bf16 tensors, and the kernel through the SPV_KHR rewrite.
//
// The queries, keys and values are f16 numbers, so the kernel's only rounding beyond f32's is
// that of the probabilities to f16 before P·V: relative 2^-11 per weight. The bound per output
// element is therefore 2^-11 · Σ p_j |v_j| / Σ p_j (attention over |v|, in float64) with 10% to
// spare, plus a floor for f32 sums and f16 subnormal weights, plus the output's own rounding.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/attention_tensor_tiles.h"
#include "codegen/kernel.h"
#include "runtime/plan_options.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"
#include "support/tensor_cores.h"
#include "tensor_cores/coop_product.h"

namespace mn::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Case {
  std::string tag;
  Shape q, k, v, mask;
  bool causal = false;
  DType dtype = DType::f32;  // of q, k, v and the output
};

// Random values in [-1, 1] that f16 holds exactly.
Array f16_values(std::mt19937_64& rng, const Shape& s, DType dtype) {
  Array a = random_array(rng, {s, dtype});
  for (double& x : a.data) x = round_to_dtype(x, DType::f16);
  return a;
}

// The kernel a check expects, and the relative rounding of the probabilities it weighs the
// values with: f16's 2^-11, bf16's 2^-9.
struct Expected {
  std::string kernel = "attention_coop";
  int p_bits = 11;
};

// The tensor-addressed kernel for `dtype` operands: bf16 probabilities with bf16 operands.
Expected tensor_kernel(DType dtype) { return {"attention_tensor", dtype == DType::bf16 ? 9 : 11}; }

// got against want within the probabilities' rounding, given `terms` = Σ p|v| / Σ p.
void expect_within_bound(const Array& got, const Array& want, const Array& terms, int64_t keys,
                         DType out, int p_bits = 11) {
  ASSERT_EQ(got.shape, want.shape);
  const double floor = 2e-5 + static_cast<double>(keys) * std::ldexp(1.0, -25);
  const double stored = out == DType::f16    ? std::ldexp(1.0, -11)
                        : out == DType::bf16 ? std::ldexp(1.0, -8)
                                             : 0.0;
  int reported = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i << ": want NaN, got " << g;
      continue;
    }
    const double bound = 1.1 * std::ldexp(terms.data[i], -p_bits) + floor + stored * std::abs(w);
    if (!(std::abs(g - w) <= bound) && reported++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << g << ", want " << w << ", bound " << bound;
    }
  }
}

// The session's kernels, space-separated.
std::string kernels_of(const Session& s) {
  std::string names;
  for (const KernelTime& k : s.profile()) names += k.name + " ";
  return names;
}

// Runs attention (out) and attention over |v| (terms) in float64 and the first in a session,
// on the tensor-core kernel `e` names wherever it fits (MN_COOP_ATTENTION=1: unset, small grids
// would take the register tiles); returns the session's output.
Array check(const Case& c, const reference::Feeds& feeds, Graph& g, const Tensor& out,
            const Tensor& terms, const reference::Feeds& device_feeds, const Expected& e = {}) {
  const ScopedEnv always("MN_COOP_ATTENTION", "1");
  const bool on_tensor = e.kernel.starts_with("attention_tensor");  // split or not
  const ScopedEnv tensor("MN_TENSOR_ATTENTION", on_tensor ? "1" : "0");
  const ScopedEnv prompts("MN_TENSOR_PROMPT_ATTENTION", on_tensor ? "1" : "0");
  g.output("out", out);
  g.output("terms", terms);
  const auto want = reference::evaluate(g, feeds);
  SessionOptions so;
  so.profile = true;
  auto s = build_session(g, so);
  for (const auto& [name, value] : device_feeds) s->set(name, value);
  s->step();
  const std::string k = kernels_of(*s);
  EXPECT_NE(k.find(e.kernel), std::string::npos) << k;
  Array got = s->get("out");
  expect_within_bound(got, want.at("out"), want.at("terms"), c.k[c.k.size() - 2], c.dtype,
                      e.p_bits);
  return got;
}

void check_case(const Case& c, const Expected& e = {}) {
  SCOPED_TRACE(c.tag);
  auto rng = rng_for("coop-attention/" + c.tag);
  Graph g;
  reference::Feeds feeds;
  Tensor q = g.input("q", c.q, c.dtype), k = g.input("k", c.k, c.dtype),
         v = g.input("v", c.v, c.dtype);
  feeds["q"] = f16_values(rng, c.q, c.dtype);
  feeds["k"] = f16_values(rng, c.k, c.dtype);
  feeds["v"] = f16_values(rng, c.v, c.dtype);
  Tensor mask;
  if (!c.mask.empty()) {
    mask = g.input("mask", c.mask);
    Array m = random_array(rng, {c.mask, DType::f32}, -2.0, 0.0);
    for (size_t i = 0; i < m.data.size(); i += 5) m.data[i] = -kInf;  // some keys masked out
    feeds["mask"] = m;
  }
  Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal);
  Tensor terms = scaled_dot_product_attention(q, k, abs(v), mask, c.causal);
  check(c, feeds, g, out, terms, feeds, e);
}

const Case kPrompts[] = {
    {"causal-gqa-d64", {2, 6, 200, 64}, {2, 2, 200, 64}, {2, 2, 200, 64}, {}, true},
    {"d128-mask-long-keys", {1, 4, 100, 128}, {1, 4, 300, 128}, {1, 4, 300, 128}, {1, 1, 100, 300}},
    {"d32-dv96-row-mask-causal", {3, 70, 32}, {3, 150, 32}, {3, 150, 96}, {3, 1, 150}, true},
    {"d16-33-rows", {1, 2, 33, 16}, {1, 2, 33, 16}, {1, 2, 33, 16}, {}, true},
    {"vision-1024", {1, 12, 1024, 64}, {1, 12, 1024, 64}, {1, 12, 1024, 64}, {}, false},
};

const Case kSixteenBit[] = {
    {"f16", {1, 4, 128, 64}, {1, 2, 128, 64}, {1, 2, 128, 64}, {}, true, DType::f16},
    {"bf16", {2, 2, 96, 64}, {2, 2, 160, 64}, {2, 2, 160, 64}, {}, false, DType::bf16},
};

TEST(CoopAttentionGpu, PromptsMatchFloat64WithinTheF16Bound) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  for (const Case& c : kPrompts) check_case(c);
}

TEST(CoopAttentionGpu, SixteenBitTensors) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  MN_REQUIRE_COOP_PATH(CoopPath::f16_storage);
  for (const Case& c : kSixteenBit) check_case(c);
}

TEST(CoopAttentionGpu, TensorAddressedKernelMatchesFloat64) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  MN_REQUIRE_COOP_PATH(CoopPath::f16_storage);
  for (const Case& c : kPrompts) check_case(c, tensor_kernel(c.dtype));
  for (const Case& c : kSixteenBit) check_case(c, tensor_kernel(c.dtype));
}

void check_cache_prefill(const Expected& e, DType cache = DType::f32);

// Every forward tile of the tensor-addressed kernel (MN_TENSOR_ATTENTION_TILE) on the prompts it
// fits: rows per workgroup, key blocks and workgroup sizes change which blocks are partial,
// which lie across the diagonal and how the matrices spread over the subgroups.
TEST(CoopAttentionGpu, EveryTensorAddressedTileMatchesFloat64) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  MN_REQUIRE_COOP_PATH(CoopPath::f16_storage);
  const codegen::DeviceTraits device = runtime::plan_options("").device;
  for (const codegen::AttentionTensorTile& tile : codegen::attention_tensor_tiles()) {
    SCOPED_TRACE(tile.name);
    const ScopedEnv env("MN_TENSOR_ATTENTION_TILE", tile.name);
    codegen::DeviceTraits forced = device;
    forced.tensor_attention_tile = tile.name;
    auto fits = [&](const Case& c) {
      const uint64_t d = static_cast<uint64_t>(c.q.back()), dv = static_cast<uint64_t>(c.v.back());
      const codegen::AttentionTensorTile t = codegen::forward_attention_tile(forced, d, dv);
      return codegen::forward_attention_fits(t, d, dv, device.coop_wg_granularity, device) &&
             codegen::forward_attention_fits(t, d, dv, device.coop_wg_bf16_granularity, device);
    };
    for (const Case& c : kPrompts) {
      if (fits(c)) check_case(c, tensor_kernel(c.dtype));
    }
    for (const Case& c : kSixteenBit) {
      if (fits(c)) check_case(c, tensor_kernel(c.dtype));
    }
    check_cache_prefill(tensor_kernel(DType::f32));  // heads of 64: every tile fits
  }
}

// Scores that grow from block to block move each row's reference maximum several times, so the
// output matrices are rescaled (through shared memory) between blocks; they also exercise
// probabilities up to e^8 in f16.
// `non_causal`, where given, is what the non-causal case runs on (its 128 rows see all 512 keys;
// the causal case's see at most 128).
void check_growing_scores(const Expected& e, const Expected* non_causal = nullptr) {
  for (bool causal : {false, true}) {
    const Case c{causal ? "growing-causal" : "growing",
                 {1, 2, 128, 64},
                 {1, 2, 512, 64},
                 {1, 2, 512, 64},
                 {},
                 causal};
    SCOPED_TRACE(c.tag);
    auto rng = rng_for("coop-attention/" + c.tag);
    Graph g;
    Tensor q = g.input("q", c.q), k = g.input("k", c.k), v = g.input("v", c.v);
    reference::Feeds feeds;
    feeds["q"] = random_array(rng, {c.q, DType::f32}, 0.25, 0.5);
    feeds["k"] = random_array(rng, {c.k, DType::f32}, 0.5, 1.0);
    for (size_t at = 0; at < feeds["k"].data.size(); ++at) {
      const double key = static_cast<double>(at / 64 % 512);
      feeds["k"].data[at] *= 1.0 + key / 32.0;  // scores up to about 40 at the last keys
    }
    for (const char* name : {"q", "k"}) {
      for (double& x : feeds[name].data) x = round_to_dtype(x, DType::f16);
    }
    feeds["v"] = f16_values(rng, c.v, DType::f32);
    Tensor out = scaled_dot_product_attention(q, k, v, {}, causal);
    check(c, feeds, g, out, scaled_dot_product_attention(q, k, abs(v), {}, causal), feeds,
          !causal && non_causal ? *non_causal : e);
  }
}

TEST(CoopAttentionGpu, ScoresGrowingAcrossBlocks) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  check_growing_scores({});
}

TEST(CoopAttentionGpu, ScoresGrowingAcrossBlocksOnTheTensorAddressedKernel) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  check_growing_scores(tensor_kernel(DType::f32));
}

// Every tile's key blocks split into segments of four (MN_TENSOR_ATTENTION_FILLS=9999; tiles of
// fewer than eight blocks keep one workgroup): the segments' O, M and L combined by the tile's
// last workgroup match the reference, growing scores moving the maximum between segments too,
// and a split step gives the same bits every run.
TEST(CoopAttentionGpu, SplitTensorAddressedKernelMatchesFloat64) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  MN_REQUIRE_COOP_PATH(CoopPath::f16_storage);
  const ScopedEnv split("MN_TENSOR_ATTENTION_FILLS", "9999");
  for (const Case& c : kPrompts) check_case(c, tensor_kernel(c.dtype));
  for (const Case& c : kSixteenBit) check_case(c, tensor_kernel(c.dtype));
  // 512 keys: 2 segments a tile where the rows see them all.
  const Expected split_kernel{"attention_tensor_split", 11};
  check_growing_scores(tensor_kernel(DType::f32), &split_kernel);
  const ScopedEnv always("MN_COOP_ATTENTION", "1");
  const ScopedEnv tensor("MN_TENSOR_ATTENTION", "1");
  const Case& vision = kPrompts[4];
  ASSERT_EQ(vision.tag, "vision-1024");
  auto rng = rng_for("coop-attention/split-bits");
  Graph g;
  Tensor q = g.input("q", vision.q), k = g.input("k", vision.k), v = g.input("v", vision.v);
  g.output("out", scaled_dot_product_attention(q, k, v, {}, true));
  SessionOptions so;
  so.profile = true;
  auto s = build_session(g, so);
  s->set("q", f16_values(rng, vision.q, DType::f32));
  s->set("k", f16_values(rng, vision.k, DType::f32));
  s->set("v", f16_values(rng, vision.v, DType::f32));
  s->step();
  EXPECT_NE(kernels_of(*s).find("attention_tensor_split"), std::string::npos) << kernels_of(*s);
  const std::vector<float> first = s->get("out").to_f32();
  for (int run = 0; run < 4; ++run) {
    s->step();
    EXPECT_EQ(s->get("out").to_f32(), first) << "run " << run;
  }
}

// Rows whose every key is masked give NaN, as the reference's 0 / 0; the others are unaffected.
void check_fully_masked_rows(const Expected& e) {
  const Case c{"masked-rows", {1, 2, 64, 32}, {1, 2, 80, 32}, {1, 2, 80, 32}, {64, 80}};
  auto rng = rng_for("coop-attention/" + c.tag);
  Graph g;
  reference::Feeds feeds;
  Tensor q = g.input("q", c.q), k = g.input("k", c.k), v = g.input("v", c.v);
  Tensor mask = g.input("mask", c.mask);
  feeds["q"] = f16_values(rng, c.q, DType::f32);
  feeds["k"] = f16_values(rng, c.k, DType::f32);
  feeds["v"] = f16_values(rng, c.v, DType::f32);
  Array m({64, 80}, DType::f32);
  for (int64_t i = 0; i < 64; ++i) {
    for (int64_t j = 0; j < 80; ++j)
      m.data[i * 80 + j] = i % 7 == 3 ? -kInf : (j % 4 == 0 ? -kInf : 0.0);
  }
  feeds["mask"] = m;
  Tensor out = scaled_dot_product_attention(q, k, v, mask, false);
  check(c, feeds, g, out, scaled_dot_product_attention(q, k, abs(v), mask, false), feeds, e);
}

TEST(CoopAttentionGpu, FullyMaskedRowsAreNaN) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  check_fully_masked_rows({});
}

TEST(CoopAttentionGpu, FullyMaskedRowsAreNaNOnTheTensorAddressedKernel) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  check_fully_masked_rows(tensor_kernel(DType::f32));
}

// A prompt prefilled into caches of 256 slots: the first sequence continuing at position 100,
// the second from 0 and right-padded after 70 tokens (position -1: output 0). Slots past each
// sequence's last position hold NaN on the device (zero in the reference): the kernel stages
// some of them with a key block but must never weigh them. `cache`: the caches' dtype (a bf16
// KV cache beside the f32 query: its values, which f16 holds too, are read exactly).
void check_cache_prefill(const Expected& e, DType cache) {
  const int64_t B = 2, Hq = 4, Hkv = 2, L = 96, T = 256, D = 64;
  const Case c{"prefill", {B, Hq, L, D}, {B, Hkv, T, D}, {B, Hkv, T, D}, {}};
  auto rng = rng_for("coop-attention/prefill");
  Graph g;
  reference::Feeds feeds;
  Tensor q = g.input("q", c.q), k = g.input("k", c.k, cache), v = g.input("v", c.v, cache);
  Tensor pos = g.input("pos", {B, 1, L}, DType::i32);
  feeds["q"] = f16_values(rng, c.q, DType::f32);
  feeds["k"] = f16_values(rng, c.k, cache);
  feeds["v"] = f16_values(rng, c.v, cache);
  for (const char* name : {"k", "v"}) {
    for (double& x : feeds[name].data) x = round_to_dtype(x, cache);
  }
  std::vector<double> p;
  for (int64_t i = 0; i < L; ++i) p.push_back(static_cast<double>(100 + i));
  for (int64_t i = 0; i < L; ++i) p.push_back(i < 70 ? static_cast<double>(i) : -1.0);
  feeds["pos"] = Array({B, 1, L}, DType::i32, p);
  const int64_t last[B] = {100 + L - 1, 69};
  reference::Feeds poisoned = feeds;
  for (const char* name : {"k", "v"}) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < Hkv; ++h) {
        for (int64_t j = last[b] + 1; j < T; ++j) {
          for (int64_t e = 0; e < D; ++e) {
            const int64_t at = ((b * Hkv + h) * T + j) * D + e;
            poisoned[name].data[at] = kNaN;
            feeds[name].data[at] = 0.0;
          }
        }
      }
    }
  }
  Tensor out = cached_attention(q, k, v, pos);
  const Array got = check(c, feeds, g, out, cached_attention(q, k, abs(v), pos), poisoned, e);
  // The padding rows see no key: exactly 0.
  for (int64_t h = 0; h < Hq; ++h) {
    for (int64_t i = 70; i < L; ++i) {
      for (int64_t x = 0; x < D; ++x) EXPECT_EQ(got.data[((Hq + h) * L + i) * D + x], 0.0);
    }
  }
}

TEST(CoopAttentionGpu, CachePrefillAtPositions) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  check_cache_prefill({});
}

TEST(CoopAttentionGpu, CachePrefillAtPositionsOnTheTensorAddressedKernel) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  check_cache_prefill(tensor_kernel(DType::f32));
}

TEST(CoopAttentionGpu, CachePrefillFromBf16Caches) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  check_cache_prefill({}, DType::bf16);
}

TEST(CoopAttentionGpu, CachePrefillFromBf16CachesOnTheTensorAddressedKernel) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  check_cache_prefill(tensor_kernel(DType::f32), DType::bf16);
}

// The kernel compiled through the SPV_KHR_cooperative_matrix rewrite (AMD, Intel), run alone.
TEST(CoopAttentionGpu, ThroughTheKhrRewrite) {
  MN_REQUIRE_COOP_PATH(CoopPath::khr);
  const Shape qs{1, 4, 150, 64}, ks{1, 2, 200, 64};
  auto rng = rng_for("coop-attention/khr");
  Graph g;
  Tensor q = g.input("q", qs), k = g.input("k", ks), v = g.input("v", ks);
  Tensor out = scaled_dot_product_attention(q, k, v, {}, true);
  Tensor terms = scaled_dot_product_attention(q, k, abs(v), {}, true);
  g.output("out", out);
  g.output("terms", terms);
  reference::Feeds feeds{{"q", f16_values(rng, qs, DType::f32)},
                         {"k", f16_values(rng, ks, DType::f32)},
                         {"v", f16_values(rng, ks, DType::f32)}};
  const auto want = reference::evaluate(g, feeds);
  const Node& n = g.node(out.id());
  std::vector<TensorType> types;
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  codegen::DeviceTraits traits = coop_trial_traits(CoopPath::khr);
  traits.coop_attention = codegen::DeviceTraits::Choice::always;
  const codegen::Lowering l = (*codegen::find_lowering(n.op_name()))({n, types, traits});
  ASSERT_EQ(l.launches.size(), 1u);
  EXPECT_EQ(l.launches[0].name, "attention_coop");
  const std::vector<double> got =
      run_on_device(l, {feeds["q"].data, feeds["k"].data, feeds["v"].data},
                    {DType::f32, DType::f32, DType::f32}, numel(qs), DType::f32, true);
  expect_within_bound(Array(qs, DType::f32, got), want.at("out"), want.at("terms"), ks[2],
                      DType::f32);
}

}  // namespace
}  // namespace mn::testing
