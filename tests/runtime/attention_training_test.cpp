// Training with attention's gradient ops: a small causal GQA language model's (build_causal_lm,
// Llama layout) gradients come from attention_lse and attention_grad_q/k/v instead of the
// graph-op backward, equal those of the graph-op form (reference and GPU), and its step plan
// holds no [..., L, L] tensor, so the arena shrinks.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/causal_lm.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// Sequence 24: no other axis of the model (hidden 32, head 8, FFN 48, vocab 50) has that size,
// so a tensor ending in [24, 24] is attention's scores or probabilities.
constexpr int64_t kSeq = 24, kVocab = 50;

LmConfig tiny_config() {
  LmConfig c;
  c.vocab_size = kVocab;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.tie_word_embeddings = true;
  return c;
}

struct TrainingGraph {
  CausalLm m;
  std::vector<std::string> grads;  // outputs "grad:<parameter>"
};

// The model with its loss and its parameters' gradients as outputs; with graph_backward,
// attention's backward in graph ops (MN_ATTENTION_BACKWARD=graph).
TrainingGraph training_graph(const LmConfig& config, int64_t batch, int64_t sequence,
                             bool graph_backward) {
  testing::ScopedEnv env("MN_ATTENTION_BACKWARD", graph_backward ? "graph" : "kernels");
  CausalLmOptions options;
  options.batch = batch;
  options.sequence = sequence;
  options.with_loss = true;
  options.seed = 21;
  TrainingGraph t{build_causal_lm(config, options), {}};
  Graph& g = *t.m.graph;
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  const std::vector<Tensor> grads = gradients(t.m.loss, params);
  for (size_t i = 0; i < params.size(); ++i) {
    t.grads.push_back("grad:" + g.node(params[i].id()).name);
    g.output(t.grads.back(), grads[i]);
  }
  return t;
}
TrainingGraph training_graph(bool graph_backward) {
  return training_graph(tiny_config(), 2, kSeq, graph_backward);
}

size_t count_ops(const Graph& g, std::string_view op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += node.op_name() == op;
  return n;
}

reference::Feeds feeds(const Graph& g) {
  reference::Feeds f = reference::initial_parameters(g);
  auto rng = testing::rng_for("attention-training");
  const TensorType tokens{{2, kSeq}, DType::i32};
  f["input_ids"] = testing::random_array(rng, tokens, 0, kVocab);
  f["labels"] = testing::random_array(rng, tokens, 0, kVocab);
  return f;
}

// Transient buffers holding a tensor whose last two axes are [L, L].
size_t square_score_buffers(const plan::StepPlan& p) {
  size_t n = 0;
  for (const plan::PlannedBuffer& b : p.buffers) {
    if (b.persistent || b.node < 0) continue;
    const Shape& s = p.graph.node(b.node).type.shape;
    n += s.size() >= 3 && s[s.size() - 1] == kSeq && s[s.size() - 2] == kSeq;
  }
  return n;
}

TEST(AttentionTraining, VjpUsesTheGradientOps) {
  const TrainingGraph fused = training_graph(false), graph_form = training_graph(true);
  for (const char* op : {"attention_lse", "attention_grad_q", "attention_grad_k",
                         "attention_grad_v"}) {
    EXPECT_EQ(count_ops(*fused.m.graph, op), 2u) << op;  // one per layer
    EXPECT_EQ(count_ops(*graph_form.m.graph, op), 0u) << op;
  }
  EXPECT_EQ(count_ops(*fused.m.graph, "softmax"), 0u);
  EXPECT_EQ(count_ops(*graph_form.m.graph, "softmax"), 2u);
}

TEST(AttentionTraining, SameLossAndGradientsAsTheGraphForm) {
  const TrainingGraph fused = training_graph(false), graph_form = training_graph(true);
  const reference::Feeds f = feeds(*fused.m.graph);
  const auto want = reference::evaluate(*graph_form.m.graph, f);
  const auto got = reference::evaluate(*fused.m.graph, f);
  EXPECT_NEAR(got.at("loss").data[0], want.at("loss").data[0], 1e-12);
  for (const std::string& name : fused.grads) {
    EXPECT_TRUE(testing::elementwise_near(got.at(name), want.at(name), 1e-10)) << name;
  }
  // The GPU: the kernels against the graph-op form's float64 values.
  auto session = build_session(*fused.m.graph);
  for (const auto& [name, value] : f) session->set(name, value);
  session->step();
  EXPECT_NEAR(session->get("loss").data[0], want.at("loss").data[0],
              1e-5 * want.at("loss").data[0]);
  for (const std::string& name : fused.grads) {
    EXPECT_TRUE(testing::elementwise_near(session->get(name), want.at(name), 1e-4)) << name;
  }
}

TEST(AttentionTraining, PlanHasNoScoreMatrix) {
  const TrainingGraph fused = training_graph(false), graph_form = training_graph(true);
  const plan::PlanOptions options;
  const plan::StepPlan after = plan::make_step_plan(*fused.m.graph, options);
  const plan::StepPlan before = plan::make_step_plan(*graph_form.m.graph, options);
  EXPECT_GT(square_score_buffers(before), 0u);
  EXPECT_EQ(square_score_buffers(after), 0u);
  EXPECT_EQ(count_ops(after.graph, "attention_grad_q"), 2u);
  EXPECT_LT(after.arena_bytes, before.arena_bytes);
  std::printf("arena bytes: graph-op backward %llu, attention gradient ops %llu\n",
              static_cast<unsigned long long>(before.arena_bytes),
              static_cast<unsigned long long>(after.arena_bytes));
}

}  // namespace
}  // namespace mn
