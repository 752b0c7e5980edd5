// Tensor cores as sessions use them: the planner routes large products to the cooperative
// kernels with the epilogue fused into their store (subgroup-scope tiles for a product that
// cannot fill the device with workgroup tiles, workgroup-scope ones for one that can, the
// implicit GEMM of a convolution with its bias), and the step's results fit the f16-operand
// model against float64.
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <meganeura/causal_lm.h>
#include <meganeura/graph.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "schedule/tiny_causal_lm.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"
#include "support/tensor_cores.h"
#include "tensor_cores/coop_product.h"

namespace mn::testing {
namespace {

std::string kernels_of(const Session& s) {
  std::string names;
  for (const KernelTime& k : s.profile()) names += k.name + " ";
  return names;
}

// relu(x·w + b) in a session; returns its kernels and checks its output against the model.
std::string run_dense(const MatmulProblem& p, uint64_t seed) {
  const MatmulRun r = prepare(p, seed);
  Graph g;
  Tensor x = g.input("x", p.a_shape());
  Tensor w = g.input("w", p.b_shape());
  Tensor b = g.input("b", {p.n});
  g.output("y", relu(matmul(x, w) + b));
  SessionOptions so;
  so.profile = true;
  auto s = build_session(g, so);
  s->set("x", Array(p.a_shape(), DType::f32, r.operands[0]));
  s->set("w", Array(p.b_shape(), DType::f32, r.operands[1]));
  s->set("b", Array({p.n}, DType::f32, r.operands[2]));
  s->step();
  EXPECT_TRUE(fits_f16_model(s->get("y").data, r.model)) << p.describe();
  return kernels_of(*s);
}

// Sessions plan only with the tiles the self-test granted: all of them on a working device
// (coop_selftest_gpu_test.cpp checks that).
TEST(CoopSessionGpu, DenseLayerOnSubgroupTiles) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  // 16 tiles of 128×128: too few for workgroup tiles; the subgroup kernel's 64×64 tiles.
  const std::string k = run_dense(
      {.tag = "dense", .m = 512, .n = 512, .k = 1024, .epilogue = Epilogue::bias_relu}, 1);
  EXPECT_NE(k.find("matmul_coop_"), std::string::npos) << k;
  EXPECT_EQ(k.find("matmul_coop_w"), std::string::npos) << k;
  EXPECT_NE(k.find("+epilogue["), std::string::npos) << k;
}

TEST(CoopSessionGpu, DenseLayerOnWorkgroupTiles) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  // 256 tiles of 128×128 fill the device's multiprocessors.
  const std::string k = run_dense(
      {.tag = "wide", .m = 2048, .n = 2048, .k = 128, .epilogue = Epilogue::bias_relu}, 2);
  EXPECT_NE(k.find("matmul_coop_w128x"), std::string::npos) << k;
  EXPECT_NE(k.find("+epilogue["), std::string::npos) << k;
}

TEST(CoopSessionGpu, ConvolutionWithBias) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  const Shape xs{2, 128, 16, 16}, ws{256, 128, 3, 3};
  const auto xv = operand_values(static_cast<size_t>(numel(xs)), 11, 1.0, DType::f32);
  const auto wv = operand_values(static_cast<size_t>(numel(ws)), 12, 1.0, DType::f32);
  const auto bv = operand_values(256, 13, 8.0, DType::f32);
  Conv2dOptions o;
  o.padding = {1, 1};
  auto conv = [&](const std::vector<double>& a, const std::vector<double>& w) {
    Graph g;
    g.output("y", conv2d(g.input("x", xs), g.input("w", ws), {}, o));
    reference::Feeds f{{"x", Array(xs, DType::f32, a)}, {"w", Array(ws, DType::f32, w)}};
    return reference::evaluate(g, f).at("y").data;
  };
  const ProductModel m = product_model(conv, xv, wv, 128 * 9, 0x1p-11, DType::f32,
                                       [&](double v, size_t i, bool magnitude) {
                                         const double c = bv[(i / 256) % 256];
                                         return magnitude ? v + std::abs(c) : v + c;
                                       });
  Graph g;
  g.output("y", conv2d(g.input("x", xs), g.input("w", ws), g.input("b", {256}), o));
  SessionOptions so;
  so.profile = true;
  auto s = build_session(g, so);
  s->set("x", Array(xs, DType::f32, xv));
  s->set("w", Array(ws, DType::f32, wv));
  s->set("b", Array({256}, DType::f32, bv));
  s->step();
  const std::string k = kernels_of(*s);
  EXPECT_NE(k.find("conv2d_coop_w128x"), std::string::npos) << k;
  EXPECT_TRUE(fits_f16_model(s->get("y").data, m)) << k;
}

// Every output of `g` on random inputs from `seed`, from sessions of `precision`, fused and
// with MN_FUSION=0 (one kernel per node), and the fused session's kernel names.
struct FusedAndUnfused {
  reference::Feeds feeds;
  std::map<std::string, Array> fused, unfused;
  std::string kernels;
};

FusedAndUnfused run_fused_and_unfused(const Graph& g, const std::string& seed, DType precision) {
  FusedAndUnfused r;
  std::mt19937_64 rng = rng_for(seed);
  for (NodeId id : g.inputs()) r.feeds[g.node(id).name] = random_array(rng, g.node(id).type);
  auto run = [&](std::string* kernels) {
    SessionOptions so;
    so.precision = precision;
    so.profile = true;
    auto s = build_session(g, so);
    for (const auto& [name, value] : r.feeds) s->set(name, value);
    s->step();
    if (kernels) *kernels = kernels_of(*s);
    std::map<std::string, Array> out;
    for (const std::string& name : s->output_names()) out[name] = s->get(name);
    return out;
  };
  r.fused = run(&r.kernels);
  ScopedEnv off("MN_FUSION", "0");
  r.unfused = run(nullptr);
  return r;
}

// run_fused_and_unfused with bf16 products: the two within 1e-2 of each other and within 3e-2 of
// float64, relative to each output's scale. Returns the fused session's kernel names.
std::string expect_bf16_fused_matches(const Graph& g, const std::string& seed) {
  const FusedAndUnfused r = run_fused_and_unfused(g, seed, DType::bf16);
  for (const auto& [name, want] : reference::evaluate(g, r.feeds)) {
    EXPECT_LE(scaled_error(r.fused.at(name), r.unfused.at(name)), 1e-2) << seed << ": " << name;
    EXPECT_LE(scaled_error(r.fused.at(name), want), 3e-2) << seed << ": " << name;
  }
  return r.kernels;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A prompt's gate and up projections in bf16 as one tensor-addressed kernel: the gate's product
// accumulates beside up's from the same loads and reaches the epilogue through shared memory.
// Whole tiles (SmolLM2's 512 × 576 × 1536) and ragged ones.
TEST(CoopSessionGpu, GateAndUpAsOneTensorKernel) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  struct Size {
    int64_t rows, hidden, inner;
  };
  for (const Size z : {Size{512, 576, 1536}, Size{300, 200, 1000}}) {
    Graph g;
    Tensor x = g.input("x", {1, z.rows, z.hidden});
    Tensor wg = g.input("wg", {z.inner, z.hidden});
    Tensor wu = g.input("wu", {z.inner, z.hidden});
    g.output("y", silu(matmul(x, wg, false, true)) * matmul(x, wu, false, true));
    const std::string what = "gate_and_up_" + std::to_string(z.rows) + "x" +
                             std::to_string(z.hidden) + "x" + std::to_string(z.inner);
    const std::string k = expect_bf16_fused_matches(g, what);
    EXPECT_EQ(occurrences(k, "+sibling+epilogue["), 1u) << what << ": " << k;
  }
}

// Products stored permuted through their tiles (schedule/permuted_stores.h) in bf16: a gradient
// split into heads through a reshape (a row stride of 64), a batched product's heads merged back
// with K split in 3 (a row stride of 192), ragged rows too.
TEST(CoopSessionGpu, ProductsStoredPermutedThroughTheirTiles) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  for (const int64_t rows : {256, 200}) {
    Graph g;
    Tensor x = g.input("x", {1, rows, 576});
    Tensor w = g.input("w", {576, 576});
    Tensor p = g.input("p", {1, 3, rows, 768});
    Tensor v = g.input("v", {1, 3, 768, 64});
    g.output("heads", permute(reshape(matmul(x, w), {1, rows, 9, 64}), {0, 2, 1, 3}) * 2.0);
    g.output("merged", permute(matmul(p, v), {0, 2, 1, 3}) + 1.0);
    const std::string what = "products_permuted_" + std::to_string(rows);
    const std::string k = expect_bf16_fused_matches(g, what);
    EXPECT_EQ(occurrences(k, "+store[permute(0,2,1,3)]"), 2u) << what << ": " << k;
  }
}

// Attention's output on the tensor-addressed forward read as it is (a reduction, as a training
// step's backward reads it) and with its heads merged in bf16 (as the output projection reads
// it): the kernel stores both (a permuted twin).
TEST(CoopSessionGpu, AttentionOutputWithAPermutedTwin) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  ScopedEnv tensor_cores("MN_COOP_ATTENTION", "1");  // wherever it fits, 36 tiles or not
  Graph g;
  Tensor q = g.input("q", {1, 9, 256, 64});
  Tensor k = g.input("k", {1, 9, 256, 64});
  Tensor v = g.input("v", {1, 9, 256, 64});
  Tensor o = scaled_dot_product_attention(q, k, v, {}, true);
  g.output("rows", sum(o * o, {3}, true));
  g.output("merged", cast(permute(cast(o, DType::bf16), {0, 2, 1, 3}), DType::f32) * 2.0);
  const std::string names = expect_bf16_fused_matches(g, "attention_permuted_twin");
  // The tensor-addressed forward (its key blocks split or not) storing the twin.
  const std::regex twin(R"(attention_tensor(_split\d+)?\+twin\[bf16,permute\(0,2,1,3\)\])");
  EXPECT_TRUE(std::regex_search(names, twin)) << names;
}

// f32 products on the cooperative kernels (workgroup- and subgroup-scope tiles) stored split
// into heads element by element through C_st (schedule/permuted_stores.h), alone and with a
// bias: the same values as the unfused kernels (the product, the add, a permute kernel).
TEST(CoopSessionGpu, ProductsStoredPermutedElementByElement) {
  MN_REQUIRE_COOP_PATH(CoopPath::workgroup);
  Graph g;
  Tensor x = g.input("x", {4, 1500, 384});  // Whisper's q, k and v at batch 4
  Tensor w = g.input("w", {384, 384});
  Tensor b = g.input("b", {384});
  Tensor x2 = g.input("x2", {1, 256, 1536});  // K of 1536: the subgroup tiles
  Tensor w2 = g.input("w2", {576, 1536});
  const std::vector<int64_t> heads{0, 2, 1, 3};
  g.output("lone", permute(reshape(matmul(x, w, false, true), {4, 1500, 6, 64}), heads) * 2.0);
  g.output("biased",
           permute(reshape(matmul(x * 0.5, w, false, true) + b, {4, 1500, 6, 64}), heads));
  g.output("long_k", permute(reshape(matmul(x2, w2, false, true), {1, 256, 9, 64}), heads) + 1.0);
  const FusedAndUnfused r = run_fused_and_unfused(g, "coop_products_permuted", DType::f32);
  for (const auto& [name, value] : r.fused) {
    EXPECT_LE(scaled_error(value, r.unfused.at(name)), 1e-6) << name;
  }
  const std::string& k = r.kernels;
  EXPECT_GE(occurrences(k, "+store[permute(0,2,1,3)]"), 3u) << k;
  EXPECT_GE(occurrences(k, "matmul_coop"), 3u) << k;
  EXPECT_EQ((" " + k).find(" permute "), std::string::npos) << k;  // no permute kernel
}

// Three steps of a loop through one f32 weight, and two products of one activation (gate and
// up): the repeated measures and packs run once (plan/shared_launches.h), and the outputs are
// the same bits as with every pack of its own (MN_SHARED_LAUNCHES=0).
TEST(CoopSessionGpu, RepeatedPacksRunOnce) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  Graph g;
  Tensor x = g.input("x", {512, 1024});
  Tensor w = g.input("w", {1024, 1024});
  for (int i = 0; i < 3; ++i) x = relu(matmul(x, w)) * 0.03125;
  Tensor wg = g.input("wg", {1024, 1024});
  Tensor wu = g.input("wu", {1024, 1024});
  g.output("y", silu(matmul(x, wg)) * matmul(x, wu));
  std::mt19937_64 rng = rng_for("repeated_packs");
  reference::Feeds feeds;
  for (NodeId id : g.inputs()) feeds[g.node(id).name] = random_array(rng, g.node(id).type);
  auto run = [&](const char* shared, std::string& kernels) {
    ScopedEnv e("MN_SHARED_LAUNCHES", shared);
    SessionOptions so;
    so.profile = true;
    auto s = build_session(g, so);
    for (const auto& [name, value] : feeds) s->set(name, value);
    s->step();
    kernels = kernels_of(*s);
    return s->get("y");
  };
  std::string once, each;
  const Array y = run("1", once), y_each = run("0", each);
  ASSERT_EQ(y.data.size(), y_each.data.size());
  for (size_t i = 0; i < y.data.size(); ++i) {
    ASSERT_EQ(y.data[i], y_each.data[i]) << "element " << i;
  }
  // Each pass packs its activation, the weight once; gate and up share their activation's pack.
  EXPECT_GE(occurrences(each, "_pack "), 10u) << each;
  EXPECT_LE(occurrences(once, "_pack ") + 3, occurrences(each, "_pack ")) << once;
  EXPECT_LE(scaled_error(y, reference::evaluate(g, feeds).at("y")), 2e-2);
}

// A bf16 training step's attention on the tensor-addressed kernels reads its q, k, v and dout
// as bf16 tensors (codegen::attention_reads_bf16_operands; MN_BF16_ATTENTION_OPERANDS=0 keeps
// the f32 copies): the kernels rounded the f32 copies to nearest bf16 as they loaded them, so
// three AdamW steps of a causal LM (heads of 64, 4 over 2, 128 tokens, batch 2) end at the same
// losses and weights, bit for bit, in fewer launches.
TEST(CoopSessionGpu, AttentionReadsBf16OperandsWithTheSameBits) {
  MN_REQUIRE_COOP_PATH(CoopPath::tensor);
  ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  struct Run {
    std::vector<double> losses, weights;
    size_t launches = 0;
  };
  auto run = [](const char* bf16_operands) {
    ScopedEnv e("MN_BF16_ATTENTION_OPERANDS", bf16_operands);
    TransformerSpec spec;
    spec.layers = 2, spec.hidden = 256, spec.heads = 4, spec.kv_heads = 2, spec.ffn = 384;
    spec.vocab = 96, spec.sequence = 128, spec.batch = 2;
    const Optimizer opt = Optimizer::adamw({.lr = 1e-3});
    CausalLm m = causal_lm_step(spec, opt, 5);
    SessionOptions so;
    so.precision = DType::bf16;
    so.profile = true;
    auto s = build_session(*m.graph, so);
    std::mt19937 rng(11);
    std::vector<int32_t> ids(static_cast<size_t>(spec.batch * spec.sequence));
    for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 96);
    s->set("input_ids", ids);
    s->set("labels", ids);
    Run r;
    for (int step = 1; step <= 3; ++step) {
      for (const auto& [n, v] : step_scalars(opt, 1e-3, step)) s->set_scalar(n, v);
      s->step();
      r.losses.push_back(s->get("loss").data.at(0));
    }
    r.launches = s->profile().size();
    r.weights = s->get("model.layers.1.self_attn.q_proj.weight").data;
    return r;
  };
  const Run bf16 = run("1"), f32 = run("0");
  EXPECT_EQ(bf16.losses, f32.losses);
  EXPECT_TRUE(bf16.weights == f32.weights) << "q_proj's weights differ after three steps";
  EXPECT_LT(bf16.launches, f32.launches);
}

}  // namespace
}  // namespace mn::testing
