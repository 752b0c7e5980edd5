// Matrix-vector products that absorb their neighbours (schedule/gemv_fusion.h,
// schedule/widened_loads.h): a decoder layer's MLP at one token, with weights stored in bf16,
// f16 or f32. The plan loses the casts of the matrices, the rms_norm and the up projection's
// own kernel; the values stay the reference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "codegen/coop_fixture.h"
#include "codegen/current_toolchain.h"
#include "codegen/lower_matmul.h"
#include "plan/step_plan.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

constexpr int64_t kHidden = 96, kInner = 160;

// rms_norm → silu(x·Wgᵀ) · (x·Wuᵀ) → ·Wdᵀ + h, the weights stored in `dtype`.
struct MlpGraph {
  Graph g;
  explicit MlpGraph(DType dtype, int64_t rows = 1) {
    Tensor h = g.input("h", {1, rows, kHidden});
    auto weight = [&](const char* name, Shape shape) {
      return cast(g.parameter(name, std::move(shape), Init::zeros(), dtype), DType::f32);
    };
    Tensor x = rms_norm(h, weight("norm", {kHidden}), 1e-5);
    Tensor gate = matmul(x, weight("gate", {kInner, kHidden}), false, true);
    Tensor up = matmul(x, weight("up", {kInner, kHidden}), false, true);
    Tensor y = matmul(silu(gate) * up, weight("down", {kHidden, kInner}), false, true) + h;
    g.output("y", y);
  }
};

reference::Feeds random_feeds(const Graph& g, const std::string& seed) {
  std::mt19937_64 rng = testing::rng_for(seed);
  reference::Feeds feeds;
  for (NodeId id : g.inputs()) feeds[g.node(id).name] = testing::random_array(rng, g.node(id).type);
  for (NodeId id : g.parameters()) {
    feeds[g.node(id).name] = testing::random_array(rng, g.node(id).type, -0.3, 0.3);
  }
  return feeds;
}

codegen::DeviceTraits subgroup_device() {
  codegen::DeviceTraits d;
  d.subgroup_add = true;
  d.storage_16bit = true;
  return d;
}

std::vector<std::string> launch_names(const plan::StepPlan& p) {
  std::vector<std::string> names;
  for (const auto& l : p.launches) names.push_back(l.kernel.name);
  return names;
}

size_t count_prefix(const std::vector<std::string>& names, std::string_view prefix) {
  return static_cast<size_t>(std::count_if(names.begin(), names.end(), [&](const std::string& n) {
    return n.rfind(prefix, 0) == 0;
  }));
}

TEST(GemvFusion, DecoderMlpIsTwoKernels) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    MlpGraph m(dtype);
    plan::PlanOptions po;
    po.device = subgroup_device();
    const std::vector<std::string> names = launch_names(plan::make_step_plan(m.g, po));
    const std::string what = std::string(dtype_name(dtype)) + ": " + ::testing::PrintToString(names);
    // The norm, gate and up in one kernel (silu · up its epilogue), down with the residual.
    ASSERT_EQ(names.size(), 2u) << what;
    EXPECT_EQ(names[0], "matmul_gemv+prologue[rms_norm]+sibling+epilogue[silu,mul]") << what;
    EXPECT_EQ(names[1], "matmul_gemv+epilogue[add]") << what;
  }
}

// With the chain (MN_GEMV_CHAIN=1): the down projection and the residual join the gate·up
// kernel, whose workgroups each multiply their outputs of h by their columns of down. At the
// H200's width (32 rows of h a workgroup) and lavapipe's (8 lanes: 64 rows, the last
// workgroup's half empty), for every weight dtype.
TEST(GemvFusion, DecoderMlpChainsIntoOneKernel) {
  for (const uint32_t width : {32u, 8u}) {
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      MlpGraph m(dtype);
      plan::PlanOptions po;
      po.device = subgroup_device();
      po.device.subgroup_size = width;
      po.device.max_workgroup_invocations = 1024;
      po.device.gemv_chain = true;
      const plan::StepPlan p = plan::make_step_plan(m.g, po);
      const std::vector<std::string> names = launch_names(p);
      const std::string what = std::string(dtype_name(dtype)) + " at width " +
                               std::to_string(width) + ": " + ::testing::PrintToString(names);
      ASSERT_EQ(names.size(), 1u) << what;
      EXPECT_EQ(names[0],
                "matmul_gemv+prologue[rms_norm]+sibling+then[matmul,add]+epilogue[silu,mul]")
          << what;
      EXPECT_EQ(p.launches[0].kernel.workgroup[0], width == 32 ? 1024u : 512u) << what;
    }
  }
}

// Where the sizes do not fit (more partials than the last workgroup adds, or a wide second
// product) or something else reads h, the two kernels stay.
TEST(GemvFusion, TheChainNeedsItsSizesAndItsOnlyReader) {
  EXPECT_EQ(codegen::gemv_chain_threads(subgroup_device(), 160, 96), 0u);  // gemv_chain off
  codegen::DeviceTraits d = subgroup_device();
  d.gemv_chain = true;
  d.subgroup_size = 32;
  d.max_workgroup_invocations = 1024;
  EXPECT_EQ(codegen::gemv_chain_threads(d, 1536, 576), 1024u);        // SmolLM2-135M: 48 partials
  EXPECT_EQ(codegen::gemv_chain_threads(d, 8192, 2048), 0u);          // 1.7B: 256 partials
  EXPECT_EQ(codegen::gemv_chain_threads(d, 1538, 576), 0u);           // h not in quads
  EXPECT_EQ(codegen::gemv_chain_threads(d, 1536, 4 * 1024 + 1), 0u);  // 20 quads a lane

  Graph g;
  Tensor h = g.input("h", {1, 1, kHidden});
  Tensor x = rms_norm(h, g.parameter("norm", {kHidden}, Init::zeros()), 1e-5);
  Tensor gate = matmul(x, g.parameter("gate", {kInner, kHidden}, Init::zeros()), false, true);
  Tensor up = matmul(x, g.parameter("up", {kInner, kHidden}, Init::zeros()), false, true);
  Tensor a = silu(gate) * up;
  g.output("y", matmul(a, g.parameter("down", {kHidden, kInner}, Init::zeros()), false, true) + h);
  g.output("a", a);  // kept: stored as it is, read by the host
  plan::PlanOptions po;
  po.device = d;
  const std::vector<std::string> names = launch_names(plan::make_step_plan(g, po));
  EXPECT_EQ(count_prefix(names, "matmul_gemv"), 2u) << ::testing::PrintToString(names);
  EXPECT_EQ(count_prefix(names, "matmul_gemv+prologue[rms_norm]+sibling+then"), 0u)
      << ::testing::PrintToString(names);
}

// On the device (lavapipe in CI: 8 lanes, 512-invocation workgroups of 64 rows of h), the
// chain (MN_GEMV_CHAIN=1) against the reference and against the two kernels, with and without
// a residual, over several steps (the counter the last workgroup sets back to zero): h of 160
// (3 partials, the last workgroup's half empty) and of 1100 (18 partials: the last workgroup
// adds them 16 at a time; 500 outputs, a lane each). mn_test_conformance's
// MatmulGpu.ChainedGemvMatchesTheReference has the shapes that chain on a GPU's wider subgroups.
TEST(GemvFusion, ChainedValuesMatchTheReference) {
  for (const auto& [inner, outs] : {std::pair<int64_t, int64_t>{kInner, kHidden}, {1100, 500}}) {
    for (const bool residual : {true, false}) {
      Graph g;
      Tensor h = g.input("h", {1, 1, kHidden});
      auto weight = [&](const char* name, Shape shape) {
        return cast(g.parameter(name, std::move(shape), Init::zeros(), DType::bf16), DType::f32);
      };
      Tensor x = rms_norm(h, weight("norm", {kHidden}), 1e-5);
      Tensor a = silu(matmul(x, weight("gate", {inner, kHidden}), false, true)) *
                 matmul(x, weight("up", {inner, kHidden}), false, true);
      Tensor y = matmul(a, weight("down", {outs, inner}), false, true);
      if (residual) y = y + g.input("r", {1, 1, outs});
      g.output("y", y);
      const std::string what = "h of " + std::to_string(inner) + ", " + std::to_string(outs) +
                               " outputs" + (residual ? " with a residual" : "");
      auto run = [&](int steps) {
        SessionOptions so;
        so.profile = true;
        auto s = build_session(g, so);
        std::vector<std::string> names;
        std::vector<Array> ys;
        for (int step = 0; step < steps; ++step) {
          const reference::Feeds feeds =
              random_feeds(g, "gemv_chain_" + what + std::to_string(step));
          for (const auto& [name, value] : feeds) s->set(name, value);
          s->step();
          ys.push_back(s->get("y"));
          EXPECT_LE(testing::scaled_error(ys.back(), reference::evaluate(g, feeds).at("y")), 2e-5)
              << what << ", step " << step;
          names.clear();
          // Cache prefetches (a discrete GPU's, plan/cache_prefetch.h) follow the windows.
          for (const KernelTime& k : s->profile()) {
            if (k.name != "cache_prefetch") names.push_back(k.name);
          }
        }
        return std::make_pair(ys, names);
      };
      std::pair<std::vector<Array>, std::vector<std::string>> with_chain;
      {
        testing::ScopedEnv on("MN_GEMV_CHAIN", "1");
        with_chain = run(3);
      }
      const auto& [chained, names] = with_chain;
      EXPECT_EQ(count_prefix(names, "matmul_gemv+prologue[rms_norm]+sibling+then[matmul"), 1u)
          << what << ": " << ::testing::PrintToString(names);
      const auto [apart, apart_names] = run(3);
      EXPECT_EQ(apart_names.size(), names.size() + 1) << what;
      for (size_t i = 0; i < chained.size(); ++i) {
        EXPECT_LE(testing::scaled_error(chained[i], apart[i]), 2e-5) << what << ", step " << i;
      }
    }
  }
}

TEST(GemvFusion, WithoutSubgroupArithmeticTheNeighboursStay) {
  MlpGraph m(DType::bf16);
  plan::PlanOptions po;
  po.device.storage_16bit = true;
  const std::vector<std::string> names = launch_names(plan::make_step_plan(m.g, po));
  EXPECT_EQ(count_prefix(names, "rms_norm"), 1u) << ::testing::PrintToString(names);
  EXPECT_EQ(count_prefix(names, "matmul_gemv"), 3u) << ::testing::PrintToString(names);
  // The matrices' casts are still absorbed (the shared-memory GEMV loads bf16 too), and the
  // norm's gamma's (the norm's own kernel loads bf16 too).
  EXPECT_EQ(count_prefix(names, "cast"), 0u) << ::testing::PrintToString(names);
}

// Several rows: gate and up are one kernel on the scalar tiled kernel (the sibling), and with
// MN_TILED_NORM=1 they take the norm of their rows instead of the GEMV, and its kernel goes;
// read by anything else, the norm keeps its kernel and the products read its value.
TEST(GemvFusion, SeveralRowsTakeTheNormInTheTiledKernel) {
  MlpGraph m(DType::f32, /*rows=*/3);
  plan::PlanOptions po;
  po.device = subgroup_device();
  EXPECT_FALSE(po.device.tiled_norm);  // off unless asked for
  po.device.tiled_norm = true;         // MN_TILED_NORM=1
  std::vector<std::string> names = launch_names(plan::make_step_plan(m.g, po));
  const std::string all = ::testing::PrintToString(names);
  EXPECT_EQ(count_prefix(names, "rms_norm"), 0u) << all;
  EXPECT_EQ(std::count(names.begin(), names.end(),
                       "matmul_16x16+prologue[rms_norm]+sibling+epilogue[silu,mul]"),
            1)
      << all;
  EXPECT_EQ(names.size(), 2u) << all;  // and the down projection with the residual
  plan::PlanOptions apart = po;
  apart.device.tiled_norm = false;  // as sessions have it unless MN_TILED_NORM=1
  names = launch_names(plan::make_step_plan(m.g, apart));
  EXPECT_EQ(count_prefix(names, "rms_norm"), 1u) << ::testing::PrintToString(names);
  EXPECT_EQ(std::count(names.begin(), names.end(), "matmul_16x16+sibling+epilogue[silu,mul]"), 1)
      << ::testing::PrintToString(names);
  apart.device.tiled_sibling = false;  // MN_TILED_SIBLING=0
  EXPECT_EQ(launch_names(plan::make_step_plan(m.g, apart)).size(), 4u);
  m.g.output("x", rms_norm(m.g.input("h2", {1, 3, kHidden}), {}, 1e-5) * 2.0);
  Tensor read_twice = rms_norm(m.g.input("h3", {1, 3, kHidden}), {}, 1e-5);
  m.g.output("twice", matmul(read_twice, m.g.input("w3", {8, kHidden}), false, true));
  m.g.output("also", read_twice + 1.0);
  names = launch_names(plan::make_step_plan(m.g, po));
  EXPECT_EQ(count_prefix(names, "rms_norm"), 2u) << ::testing::PrintToString(names);
}

// On the device: products taking the norm of their rows on the tiled kernel, with and without
// a gain, with an epilogue, stored permuted, a batch, K split over workgroups, ragged tiles;
// against the float64 reference and the unfused kernels.
TEST(GemvFusion, RowsNormedInTheTiledKernelMatchTheReference) {
  Graph g;
  Tensor h = g.input("h", {2, 37, kHidden});
  Tensor gain = g.parameter("gain", {kHidden}, Init::zeros());
  Tensor x = rms_norm(h, gain, 1e-5);
  g.output("q", matmul(x, g.parameter("wq", {72, kHidden}, Init::zeros()), false, true));
  g.output("biased", matmul(x, g.parameter("wk", {40, kHidden}, Init::zeros()), false, true) +
                         g.parameter("bk", {40}, Init::zeros()));
  // Split into heads: stored permuted by the same kernel.
  g.output("heads",
           permute(reshape(matmul(x, g.parameter("wv", {40, kHidden}, Init::zeros()), false, true),
                           {2, 37, 5, 8}),
                   {0, 2, 1, 3}) *
               2.0);
  Tensor plain = rms_norm(g.input("p", {5, 2000}), {}, 1e-6);
  g.output("long_k", matmul(plain, g.parameter("wl", {2000, 24}, Init::zeros())));
  const reference::Feeds feeds = random_feeds(g, "tiled_norm");
  const auto expected = reference::evaluate(g, feeds);
  testing::ScopedEnv norm("MN_TILED_NORM", "1");
  for (const char* split : {"0", "3"}) {
    testing::ScopedEnv splits("MN_MATMUL_SPLIT_K", split);
    auto run = [&] {
      auto s = build_session(g);
      for (const auto& [name, value] : feeds) s->set(name, value);
      s->step();
      std::map<std::string, Array> out;
      for (const auto& [name, value] : expected) out[name] = s->get(name);
      return std::make_pair(out, s->memory().dispatches);
    };
    const auto [fused, fused_dispatches] = run();
    testing::ScopedEnv off("MN_FUSION", "0");
    const auto [unfused, unfused_dispatches] = run();
    for (const auto& [name, want] : expected) {
      EXPECT_LE(testing::scaled_error(fused.at(name), want), 2e-5) << name << ", splits " << split;
      EXPECT_LE(testing::scaled_error(fused.at(name), unfused.at(name)), 2e-5) << name;
    }
    EXPECT_LT(fused_dispatches, unfused_dispatches);
  }
  plan::PlanOptions po;
  po.device.tiled_norm = true;
  std::vector<std::string> names = launch_names(plan::make_step_plan(g, po));
  EXPECT_EQ(count_prefix(names, "rms_norm"), 0u) << ::testing::PrintToString(names);
  EXPECT_EQ(count_prefix(names, "permute"), 0u) << ::testing::PrintToString(names);
  po.device.matmul_split_k = 3;  // as MN_MATMUL_SPLIT_K=3 sets it
  names = launch_names(plan::make_step_plan(g, po));
  EXPECT_EQ(std::count(names.begin(), names.end(), "matmul_16x16_split3+prologue[rms_norm]"), 1)
      << ::testing::PrintToString(names);
}

// On the device (lavapipe in CI): fused values against the float64 reference and against the
// unfused kernels.
TEST(GemvFusion, ValuesMatchTheReference) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    MlpGraph m(dtype);
    const reference::Feeds feeds = random_feeds(m.g, "gemv_fusion_" + std::string(dtype_name(dtype)));
    const Array expected = reference::evaluate(m.g, feeds).at("y");
    auto run = [&] {
      auto s = build_session(m.g);
      for (const auto& [name, value] : feeds) s->set(name, value);
      s->step();
      return std::make_pair(s->get("y"), s->memory().dispatches);
    };
    const auto [fused, fused_dispatches] = run();
    testing::ScopedEnv off("MN_FUSION", "0");
    const auto [unfused, unfused_dispatches] = run();
    EXPECT_LE(testing::scaled_error(fused, expected), 2e-5) << dtype_name(dtype);
    EXPECT_LE(testing::scaled_error(fused, unfused), 2e-5) << dtype_name(dtype);
    EXPECT_LT(fused_dispatches, unfused_dispatches) << dtype_name(dtype);
  }
}

// On the device: the MLP of several rows on the tiled kernel, gate and up as one product with
// and without the norm inside, with its K whole and split, 16×16 and 64×64 tiles (3 and 40
// rows), weights stored in f32 and bf16; against the reference and the unfused kernels.
TEST(GemvFusion, TiledSiblingsMatchTheReference) {
  for (int64_t rows : {3, 40}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      MlpGraph m(dtype, rows);
      const std::string what = std::to_string(rows) + " rows, " + dtype_name(dtype);
      const reference::Feeds feeds = random_feeds(m.g, "tiled_sibling_" + what);
      const Array expected = reference::evaluate(m.g, feeds).at("y");
      for (const char* split : {"0", "2"})
        for (const char* norm : {"0", "1"}) {
          testing::ScopedEnv splits("MN_MATMUL_SPLIT_K", split);
          testing::ScopedEnv norms("MN_TILED_NORM", norm);
          auto run = [&] {
            auto s = build_session(m.g);
            for (const auto& [name, value] : feeds) s->set(name, value);
            s->step();
            return s->get("y");
          };
          const Array fused = run();
          testing::ScopedEnv off("MN_FUSION", "0");
          const Array unfused = run();
          EXPECT_LE(testing::scaled_error(fused, expected), 2e-5)
              << what << ", splits " << split << ", norm " << norm;
          EXPECT_LE(testing::scaled_error(fused, unfused), 2e-5)
              << what << ", splits " << split << ", norm " << norm;
        }
    }
    plan::PlanOptions po;
    po.device.storage_16bit = true;
    po.device.matmul_split_k = 2;
    po.device.tiled_norm = true;
    const std::vector<std::string> names =
        launch_names(plan::make_step_plan(MlpGraph(DType::bf16, rows).g, po));
    EXPECT_EQ(std::count_if(names.begin(), names.end(),
                            [](const std::string& n) {
                              return n.find("_split2+prologue[rms_norm]+sibling") !=
                                     std::string::npos;
                            }),
              1)
        << ::testing::PrintToString(names);
  }
}

// x·Wᵀ alone over K of every kind: the scalar loads (K not a multiple of 4) and groups of four,
// each through the tail only and through the eight-loads loop.
TEST(GemvFusion, ProductsOfEveryLength) {
  for (int64_t k : {7, 96, 300, 1030}) {
    Graph g;
    Tensor x = g.input("x", {1, k});
    g.output("y", matmul(x, g.parameter("w", {37, k}, Init::zeros()), false, true));
    const reference::Feeds feeds = random_feeds(g, "gemv_length_" + std::to_string(k));
    auto s = build_session(g);
    for (const auto& [name, value] : feeds) s->set(name, value);
    s->step();
    EXPECT_LE(testing::scaled_error(s->get("y"), reference::evaluate(g, feeds).at("y")), 1e-5)
        << "K = " << k;
  }
}

// A decoding layer's q, k and v: products of one normed vector with matrices of one K and
// their own rows, in one launch (stacked), each stored; the same values as one launch each.
// K of 7 takes the scalar loads, 300 the quads.
TEST(GemvFusion, ProductsOfOneVectorStackIntoOneLaunch) {
  for (const int64_t k : {7, 300}) {
    for (DType dtype : {DType::bf16, DType::f32}) {
      const std::string what = std::string(dtype_name(dtype)) + " K = " + std::to_string(k);
      Graph g;
      Tensor h = g.input("h", {1, 1, k});
      auto weight = [&](const std::string& name, Shape shape) {
        return cast(g.parameter(name, std::move(shape), Init::zeros(), dtype), DType::f32);
      };
      Tensor x = rms_norm(h, weight("norm", {k}), 1e-5);
      g.output("q", matmul(x, weight("wq", {40, k}), false, true));
      g.output("k", matmul(x, weight("wk", {13, k}), false, true));
      g.output("v", matmul(x, weight("wv", {13, k}), false, true) * 2.0);  // an epilogue: apart
      g.output("o", matmul(h, weight("wo", {9, k}), false, true));         // another vector: apart
      plan::PlanOptions po;
      po.device = subgroup_device();
      const std::vector<std::string> names = launch_names(plan::make_step_plan(g, po));
      EXPECT_EQ(count_prefix(names, "matmul_gemv+prologue[rms_norm]+stacked[1]"), 1u)
          << what << ": " << ::testing::PrintToString(names);
      EXPECT_EQ(names.size(), 3u) << what << ": " << ::testing::PrintToString(names);

      const reference::Feeds feeds = random_feeds(g, "gemv_stacked_" + what);
      const auto expected = reference::evaluate(g, feeds);
      auto run = [&] {
        auto s = build_session(g);
        for (const auto& [name, value] : feeds) s->set(name, value);
        s->step();
        std::map<std::string, Array> out;
        for (const char* n : {"q", "k", "v", "o"}) out[n] = s->get(n);
        return out;
      };
      const auto fused = run();
      testing::ScopedEnv off("MN_FUSION", "0");
      const auto unfused = run();
      for (const char* n : {"q", "k", "v", "o"}) {
        EXPECT_LE(testing::scaled_error(fused.at(n), expected.at(n)), 2e-5) << what << " " << n;
        EXPECT_LE(testing::scaled_error(fused.at(n), unfused.at(n)), 2e-5) << what << " " << n;
      }
    }
  }
}

// A prompt's MLP (SmolLM2's widths, bf16 products) over `rows` rows, planned for the H200's
// traits (tensor-addressed matrices, the sibling on as sessions set it).
struct PromptMlp {
  Graph g;
  plan::PlanOptions po;
  explicit PromptMlp(int64_t rows) {
    Tensor h = g.input("h", {1, rows, 576});
    auto weight = [&](const char* name, Shape shape) {
      return cast(g.parameter(name, std::move(shape), Init::zeros(), DType::bf16), DType::f32);
    };
    Tensor x = rms_norm(h, weight("norm", {576}), 1e-5);
    Tensor gate = matmul(x, weight("gate", {1536, 576}), false, true);
    Tensor up = matmul(x, weight("up", {1536, 576}), false, true);
    g.output("y", matmul(silu(gate) * up, weight("down", {576, 1536}), false, true) + h);
    po.device = codegen::testing::h200_wg_traits();
    po.device.storage_16bit = true;
    po.device.coop_tensor = true;
    po.device.coop_wg_bf16_granularity = po.device.coop_wg_granularity;
    po.device.tensor_sibling = true;
    po.precision = DType::bf16;
  }
  // Gate and up stay two products.
  void expect_apart(const plan::PlanOptions& o, const std::string& why) const {
    const std::vector<std::string> apart = launch_names(plan::make_step_plan(g, o));
    EXPECT_EQ(count_prefix(apart, "matmul_tensor_"), 3u)
        << why << ": " << ::testing::PrintToString(apart);
    for (const std::string& n : apart) EXPECT_EQ(n.find("+sibling"), std::string::npos) << n;
  }
};

// At 512 rows the up projection's tensor kernel computes the gate beside it from the same loads
// of the normed rows (one launch and one barrier fewer), as valid SPIR-V; switched off, or where
// the tile's shared copy of the gate's accumulator does not fit, the two products stay apart.
TEST(GemvFusion, APromptsGateAndUpShareATensorKernel) {
  PromptMlp m(512);
  const plan::StepPlan p = plan::make_step_plan(m.g, m.po);
  const std::vector<std::string> names = launch_names(p);
  const std::string what = ::testing::PrintToString(names);
  EXPECT_EQ(count_prefix(names, "matmul_tensor_"), 2u) << what;  // gate and up; down
  const auto sibling = std::find_if(p.launches.begin(), p.launches.end(), [](const auto& l) {
    return l.kernel.name.find("+sibling+epilogue[") != std::string::npos;
  });
  ASSERT_NE(sibling, p.launches.end()) << what;
  // Two accumulators: a tile of at most 32 floats per invocation each (32 x 64 on 64), unsplit.
  EXPECT_EQ(sibling->kernel.name.rfind("matmul_tensor_t32x64k64+sibling", 0), 0u)
      << sibling->kernel.name;
  if (codegen::current_glslang().available && !test::spirv_val_path().empty()) {
    const codegen::testing::ValidatedKernel k = codegen::testing::validate_current(sibling->kernel);
    EXPECT_EQ(k.errors, "") << sibling->kernel.name;
    // The gate's accumulator goes to shared memory for the epilogue.
    EXPECT_NE(k.disassembly.find("OpCooperativeMatrixStoreKHR"), std::string::npos);
  }
  plan::PlanOptions off = m.po;
  off.device.tensor_sibling = false;  // MN_TENSOR_SIBLING=0
  m.expect_apart(off, "switched off");
  plan::PlanOptions small = m.po;
  small.device.max_shared_bytes = 2048;  // no tile's copy fits
  m.expect_apart(small, "2 KiB of shared memory");
}

// At 4096 rows (a batch of 8 × 512) the products take the large tiles one by one: a sibling
// would hold them to 32 × 64.
TEST(GemvFusion, LargeProductsKeepTheirLargeTiles) {
  const PromptMlp m(4096);
  m.expect_apart(m.po, "4096 rows");
}

}  // namespace
}  // namespace mn
