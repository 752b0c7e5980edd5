// Casts done by the kernels next to them (schedule/narrowed_stores.h, schedule/widened_loads.h):
// a rotary embedding, permute or normalization whose f32 result only a narrowing cast reads
// stores the 16-bit value itself; a permute loads a cast's operand and converts as it stores,
// and stores a widening of its 16-bit result for a reader that could not widen it; a rotation
// reads a 16-bit operand widened, a normalization its 16-bit gamma and beta; a reduction's
// epilogue ending in a narrowing cast stores the 16-bit value. The values are the unfused kernels'
// bit for bit, the reference's to bf16's rounding, with fewer launches; a bf16 training step of a
// causal LM keeps no cast beside its rotations and permutes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/causal_lm.h>
#include <meganeura/graph.h>
#include <meganeura/hf.h>
#include <meganeura/models.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "schedule/fused_and_unfused.h"
#include "schedule/tiny_causal_lm.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using testing::run_fused_and_unfused;

// The step of `g` with fusion and without: the same bits, the reference's within
// tolerance(name) (the device computes in f32, the reference in f64: roundings to bf16 may differ
// by one unit). Returns the fused and the unfused step's dispatches.
std::pair<size_t, size_t> expect_fused_matches(
    const Graph& g, const reference::Feeds& feeds,
    const std::function<double(const std::string&)>& tolerance) {
  const auto [fused, fused_dispatches, unfused, unfused_dispatches] =
      run_fused_and_unfused(g, feeds);
  for (const auto& [name, expected] : reference::evaluate(g, feeds)) {
    EXPECT_EQ(fused.at(name).data, unfused.at(name).data) << name;
    EXPECT_TRUE(testing::elementwise_near(fused.at(name), expected, tolerance(name))) << name;
  }
  return {fused_dispatches, unfused_dispatches};
}

TEST(NarrowedStoresGpu, CastsInsideCopiesRotationsAndReductions) {
  auto rng = testing::rng_for("narrowed-stores");
  Graph g;
  reference::Feeds feeds;
  Tensor x = g.input("x", {2, 16, 3, 8});  // [B, L, H, D]
  feeds["x"] = testing::random_array(rng, x.type());
  Array pos({1, 16}, DType::i32);
  for (int64_t l = 0; l < 16; ++l) pos.data[static_cast<size_t>(l)] = static_cast<double>(3 * l);
  Tensor positions = g.constant(pos);
  // A computed 16-bit value (stored by its own kernel), permuted by a copy that widens it.
  Tensor xb = cast(x * 2.0, DType::bf16);
  Tensor heads = permute(cast(xb, DType::f32), {0, 2, 1, 3});  // [B, H, L, D]
  // Rotated from the 16-bit value (widened as it loads), stored narrowed: rope's only reader
  // is the cast.
  Tensor rotated =
      rope_positions(cast(permute(xb, {0, 2, 1, 3}), DType::f32), unsqueeze(positions, 1));
  g.output("rotated_bf16", cast(rotated, DType::bf16));
  // A narrowing cast permuted back (the copy rounds as it stores).
  g.output("back", permute(cast(heads * 0.75 + 1.0, DType::bf16), {0, 2, 1, 3}));
  // A permute whose f32 result only a narrowing cast reads.
  g.output("permuted_bf16", cast(permute(x * 3.0, {0, 2, 1, 3}), DType::bf16));
  // A sum over the heads' groups, narrowed in the reduction's epilogue.
  g.output("summed_bf16", cast(sum_to(heads * heads, {2, 1, 16, 8}), DType::bf16));
  g.output("heads", heads + 0.0);

  // The rotation and the sum round to bf16; the copies are exact.
  const auto [fused_dispatches, unfused_dispatches] =
      expect_fused_matches(g, feeds, [](const std::string& name) {
        return name == "rotated_bf16" || name == "summed_bf16" ? 1e-2 : 0.0;
      });
  // The casts of x·2 and of the pointwise tail stay fused; the other four casts ride in the
  // rotation, the two permutes and the sum.
  EXPECT_LE(fused_dispatches + 4, unfused_dispatches);
}

// A cross-entropy over a bf16 product's logits (an LM head with mixed precision): the loss and
// its gradient read the bf16 logits widened, with no f32 copy, and the gradient's kernel stores
// the bf16 value the product's backward reads. The same bits as the unfused kernels, the
// reference's within bf16's rounding, and no cast launch of the logits' shape.
TEST(NarrowedStoresGpu, CrossEntropyReadsBf16LogitsAndStoresABf16Gradient) {
  auto rng = testing::rng_for("narrowed-cross-entropy");
  Graph g;
  reference::Feeds feeds;
  Tensor h = g.input("h", {6, 16});
  Tensor w = g.input("w", {40, 16});
  Tensor targets = g.input("targets", {6}, DType::i32);
  feeds["h"] = testing::random_array(rng, h.type());
  feeds["w"] = testing::random_array(rng, w.type());
  feeds["targets"] = Array({6}, DType::i32, {3, 0, 39, 17, 8, 25});
  Tensor logits = matmul(cast(h, DType::bf16), cast(w, DType::bf16), false, true);  // bf16 [6, 40]
  Tensor loss = cross_entropy(cast(logits, DType::f32), targets);
  const std::vector<Tensor> grads = gradients(loss, {h, w});
  g.output("loss", loss);
  g.output("dh", grads[0]);
  g.output("dw", grads[1]);

  const auto [fused_dispatches, unfused_dispatches] =
      expect_fused_matches(g, feeds, [](const std::string&) { return 2e-2; });
  EXPECT_LT(fused_dispatches, unfused_dispatches);

  plan::PlanOptions po;
  po.device.storage_16bit = true;
  const plan::StepPlan p = plan::make_step_plan(g, po);
  bool narrowed_gradient = false;
  for (const plan::PlannedLaunch& l : p.launches) {
    const Node& n = p.graph.node(l.nodes.front());
    const bool logits_shape = n.type.shape == Shape{6, 40};
    EXPECT_FALSE(n.op_name() == "cast" && l.nodes.size() == 1 && logits_shape)
        << "the logits' cast from " << p.graph.node(n.inputs[0]).op_name() << " on its own";
    if (n.op_name() == "cross_entropy_backward") {
      ASSERT_EQ(l.nodes.size(), 2u) << l.kernel.name;  // {cross_entropy_backward, cast}
      EXPECT_EQ(p.graph.node(l.nodes.back()).type.dtype, DType::bf16);
      narrowed_gradient = true;
    }
  }
  EXPECT_TRUE(narrowed_gradient);
}

// Values read both in f32 and through a cast (a softmax's probabilities, a rotation, attention's
// output, a permute of a 16-bit tensor that attention reads widened): their kernels store the
// cast too (schedule/narrowed_stores.h twin_stores), bit for bit what the cast kernels store.
TEST(NarrowedStoresGpu, TwinStoresOfValuesReadInTwoDtypes) {
  Graph g;
  reference::Feeds feeds;
  testing::RandomInputs input{g, feeds, testing::rng_for("twin-stores")};
  Tensor x = input("x", {2, 3, 16, 8});  // [B, H, L, D]
  Tensor y = input("y", {2, 16, 3, 8});  // [B, L, H, D]
  Tensor w = input("w", {8, 8});
  Array pos({1, 16}, DType::i32);
  for (int64_t l = 0; l < 16; ++l) pos.data[static_cast<size_t>(l)] = static_cast<double>(2 * l);
  const Tensor w16 = cast(w, DType::bf16);
  const auto product = [&](Tensor a16) { return cast(matmul(a16, w16), DType::f32); };

  Tensor p = softmax(x * 2.0);
  g.output("p_product", product(cast(p, DType::bf16)));
  g.output("p_twice", p * 2.0);
  Tensor positions = unsqueeze(g.constant(pos), 1);
  Tensor q = rope_positions(x * 0.5, positions);
  g.output("q_product", product(cast(q, DType::bf16)));
  // A second rotation by the same positions: stacked with q's, each storing its twin.
  Tensor k = rope_positions(x * 0.25, positions);
  g.output("k_product", product(cast(k, DType::bf16)));
  // A 16-bit value permuted into heads by a copy of its own dtype, read by attention (f32) and
  // by a product (bf16).
  Tensor y16 = cast(y * 1.5, DType::bf16);
  g.output("y16", cast(y16, DType::f32) + 1.0);  // stored in bf16 by its own kernel
  Tensor v16 = permute(y16, {0, 2, 1, 3});
  g.output("v_product", product(v16));
  Tensor attended = scaled_dot_product_attention(q, k, cast(v16, DType::f32), {}, true);
  g.output("o_product", product(cast(attended, DType::bf16)));
  g.output("o", attended * 3.0);

  const auto [fused_dispatches, unfused_dispatches] =
      expect_fused_matches(g, feeds, [](const std::string&) { return 2e-2; });
  plan::PlanOptions po;
  po.device.storage_16bit = true;
  const plan::StepPlan plan = plan::make_step_plan(g, po);
  std::set<std::string> twins;
  for (const plan::PlannedLaunch& l : plan.launches) {
    if (l.kernel.name.find("+twin[") == std::string::npos) continue;
    twins.insert(std::string(plan.graph.node(l.nodes.front()).op_name()));
    EXPECT_EQ(plan.graph.node(l.nodes.back()).op_name(), "cast") << l.kernel.name;
  }
  EXPECT_EQ(twins, (std::set<std::string>{"softmax", "rope_positions", "permute",
                                          "scaled_dot_product_attention"}));
  bool stacked_twins = false;
  for (const plan::PlannedLaunch& l : plan.launches) {
    stacked_twins = stacked_twins || l.kernel.name.ends_with("+stacked+twin[bf16]+twin[bf16]");
  }
  EXPECT_TRUE(stacked_twins);
  // Five cast launches fewer than the fusion without twins would have, and a rotation.
  EXPECT_LE(fused_dispatches + 6, unfused_dispatches);
}

// Normalizations storing their narrowing cast and reading 16-bit gamma and beta; a permute of a
// 16-bit tensor storing its widening for a reader that reads f32 (a cache write), not for a
// rotation (which reads the 16-bit tensor through the permute instead).
TEST(NarrowedStoresGpu, NormalizationsAndWideningCopies) {
  auto rng = testing::rng_for("narrowed-norms");
  Graph g;
  reference::Feeds feeds;
  Tensor x = g.input("x", {2, 16, 32});
  Tensor gamma = g.input("gamma", {32}, DType::bf16);
  Tensor beta = g.input("beta", {32}, DType::bf16);
  feeds["x"] = testing::random_array(rng, x.type());
  for (const char* n : {"gamma", "beta"}) {
    Array a = testing::random_array(rng, {{32}, DType::bf16}, 0.5, 1.5);
    for (double& v : a.data) v = round_to_dtype(v, DType::bf16);
    feeds[n] = a;
  }
  const Tensor g32 = cast(gamma, DType::f32), b32 = cast(beta, DType::f32);
  g.output("rms_bf16", cast(rms_norm(x, g32, 1e-5), DType::bf16));
  g.output("ln_bf16", cast(layer_norm(x * 2.0, g32, b32, 1, 1e-5), DType::bf16));
  // x in bf16, split into 4 heads of 8 and widened for a cache write.
  Tensor heads = permute(reshape(cast(x + 1.0, DType::bf16), {2, 16, 4, 8}), {0, 2, 1, 3});
  Tensor cache = g.state("cache", {2, 4, 24, 8});
  Array at({2, 16}, DType::i32);
  for (size_t i = 0; i < at.data.size(); ++i) at.data[i] = static_cast<double>(i % 16 + 4);
  g.output("cache_out", cache_write(cache, cast(heads, DType::f32), g.constant(at)) + 0.0);

  // The norms round to bf16; the cache's copy is exact.
  const auto [fused_dispatches, unfused_dispatches] = expect_fused_matches(
      g, feeds, [](const std::string& name) { return name == "cache_out" ? 0.0 : 1e-2; });
  // Gone: two gamma casts and a beta cast, the norms' two narrowings, the widening of the heads.
  EXPECT_LE(fused_dispatches + 6, unfused_dispatches);
}

// A bf16 model's prompt in bf16 products plans no cast launch: its norms read the bf16 gammas
// and store bf16 for the products, the values' permute stores the f32 the cache holds, and the
// rotations read the bf16 queries and keys through their permutes.
TEST(NarrowedStores, ABf16PromptHasNoCastLaunches) {
  TransformerSpec spec;
  spec.layers = 2, spec.hidden = 64, spec.heads = 4, spec.kv_heads = 2, spec.ffn = 96;
  spec.vocab = 96;
  LmStepOptions so;
  so.block = 16;
  so.max_context = 32;
  so.dtype = DType::bf16;
  const CausalLm lm = build_lm_step(llama_config(spec), so);
  plan::PlanOptions po;
  po.precision = DType::bf16;
  po.device.storage_16bit = true;
  const plan::StepPlan p = plan::make_step_plan(*lm.graph, po);
  int norms = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    const Node& n = p.graph.node(l.nodes.front());
    EXPECT_FALSE(n.op_name() == "cast" && l.nodes.size() == 1)
        << "a cast of " << p.graph.node(n.inputs[0]).op_name() << " on its own";
    if (n.op_name() == "rms_norm" && l.nodes.size() == 2) {  // {rms_norm, cast}
      ++norms;
      EXPECT_EQ(p.buffers[static_cast<size_t>(l.buffers.back())].bytes,
                static_cast<uint64_t>(n.type.numel()) * 2);
    }
  }
  // Before attention and before the MLP in each layer; the last norm's row goes to the head's
  // f32 product.
  EXPECT_EQ(norms, 4);
}

// The bf16 training step of a small causal LM: no cast launches beside its rotations and
// permutes; rotations store bf16; and the step's loss and updated weights match the
// unfused kernels' within bf16's rounding.
struct TinyLm {
  CausalLm m = testing::tiny_causal_lm_step(1);
};

TEST(NarrowedStores, ABf16TrainingStepCastsInsideItsRotationsAndPermutes) {
  TinyLm lm;
  plan::PlanOptions po;
  po.precision = DType::bf16;
  po.device.storage_16bit = true;
  const plan::StepPlan p = plan::make_step_plan(*lm.m.graph, po);
  const Graph& g = p.graph;
  // Attention reads f32 operands (codegen/widened_operands.h): the f32 rotations it reads stay,
  // and their narrowings for the products, and the widening of the values.
  std::set<NodeId> attention_operands;
  for (NodeId v = 0; v < static_cast<NodeId>(g.size()); ++v) {
    if (g.node(v).op_name() != "scaled_dot_product_attention") continue;
    for (NodeId in : g.node(v).inputs) attention_operands.insert(in);
  }
  int narrowed_rotations = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    const Node& n = g.node(l.nodes.front());  // l.node: the first value it stores
    const std::string_view op = n.op_name();
    if (op == "cast" && l.nodes.size() == 1 && !attention_operands.count(l.nodes.front()) &&
        !attention_operands.count(n.inputs[0])) {
      const std::string_view from = g.node(n.inputs[0]).op_name();
      EXPECT_TRUE(from != "rope_positions" && from != "rope_positions_backward" &&
                  from != "permute" && from != "sum_to")
          << "cast of " << from << " left on its own";
      for (const plan::PlannedLaunch& reader : p.launches) {
        for (NodeId in : p.groups[static_cast<size_t>(reader.group)].inputs) {
          if (in != l.node) continue;
          const std::string_view r = g.node(reader.nodes.front()).op_name();
          EXPECT_TRUE(r != "permute" && r != "rope_positions" && r != "rope_positions_backward")
              << r << " reads a cast instead of its operand";
        }
      }
    }
    // {rotation, cast}, or {rotation, cast, permute} where the rotation also stores through the
    // permute that reads it (schedule/permuted_rotations.h), maybe twice over where a second
    // rotation is stacked beside it (schedule/stacked_rotations.h), or a twin storing both
    // dtypes: its bf16 values take 2 bytes an element.
    if ((op == "rope_positions" || op == "rope_positions_backward") && l.nodes.size() >= 2) {
      EXPECT_TRUE(std::any_of(l.nodes.begin(), l.nodes.end(), [&](NodeId v) {
        return g.node(v).op_name() == "cast";
      })) << l.kernel.name;
      const schedule::KernelGroup& group = p.groups[static_cast<size_t>(l.group)];
      int narrowed = 0;
      for (size_t b = 0; b < l.kernel.bindings.size(); ++b) {
        const codegen::ArgRef& arg = l.kernel.bindings[b].arg;
        if (arg.kind != codegen::ArgRef::Kind::output) continue;
        const Node& stored = g.node(group.outputs.at(static_cast<size_t>(arg.index)));
        if (stored.type.dtype != DType::bf16) continue;
        EXPECT_EQ(p.buffers[static_cast<size_t>(l.buffers[b])].bytes,
                  static_cast<uint64_t>(stored.type.numel()) * 2);
        ++narrowed;
      }
      EXPECT_GE(narrowed, 1) << l.kernel.name;
      narrowed_rotations += narrowed;
    }
  }
  EXPECT_GE(narrowed_rotations, 2);  // the backward pass's gradients of q and k at least
}

TEST(NarrowedStoresGpu, ABf16TrainingStepMatchesTheUnfusedKernels) {
  auto step = [](bool fused) {
    std::optional<testing::ScopedEnv> off;
    if (!fused) off.emplace("MN_FUSION", "0");
    TinyLm lm;
    SessionOptions so;
    so.precision = DType::bf16;
    auto s = build_session(*lm.m.graph, so);
    std::mt19937 rng(5);
    std::vector<int32_t> tokens(32);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 96);
    s->set("input_ids", tokens);
    s->set("labels", tokens);
    for (const auto& [n, v] : step_scalars(Optimizer::adamw(), 1e-3, 1)) s->set_scalar(n, v);
    s->step();
    return std::pair{s->get("loss").data[0], s->get("model.layers.0.self_attn.q_proj.weight").data};
  };
  const auto [loss, q] = step(true);
  const auto [unfused_loss, unfused_q] = step(false);
  EXPECT_NEAR(loss, unfused_loss, 1e-3 * std::abs(unfused_loss));
  ASSERT_EQ(q.size(), unfused_q.size());
  double err = 0;
  for (size_t i = 0; i < q.size(); ++i) err = std::max(err, std::abs(q[i] - unfused_q[i]));
  // One AdamW step moves each weight by about the learning rate; the two runs' gradients differ
  // by bf16 roundings, which moves a weight far less.
  EXPECT_LT(err, 1e-4);
}

}  // namespace
}  // namespace mn
