// The built-in language model on the float64 reference: shape checks, the loss at
// initialization, causality, and every parameter's gradient against central differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <meganeura/autodiff.h>
#include <meganeura/models.h>
#include <meganeura/reference.h>

#include "support/random_fill.h"
#include "support/small_transformer.h"

namespace mn {
namespace {

TransformerSpec tiny() { return testing::small_transformer(2, 16, 11, 5, 3); }

reference::Feeds feeds_for(const LanguageModel& m, std::mt19937_64& rng) {
  reference::Feeds f = reference::initial_parameters(*m.graph);
  f["tokens"] = testing::random_array(rng, m.tokens.type(), 0, 11);
  f["targets"] = testing::random_array(rng, m.targets.type(), 0, 11);
  return f;
}

TEST(Transformer, SmolLM2ShapeAndParameterCount) {
  TransformerSpec s = smollm2_135m();
  s.with_loss = false;
  LanguageModel m = build_transformer(s);
  int64_t params = 0;
  for (NodeId id : m.graph->parameters()) params += m.graph->node(id).type.numel();
  // SmolLM2-135M: 134,515,008 parameters (tied embeddings).
  EXPECT_EQ(params, 134515008);
  EXPECT_EQ(m.logits.shape(), (Shape{1, 256, 49152}));
  EXPECT_TRUE(m.graph->find_parameter("model.layers.29.mlp.down_proj.weight").has_value());
}

TEST(Transformer, RejectsBadSpecs) {
  TransformerSpec s = tiny();
  s.heads = 3;  // 16 is not a multiple of 3
  EXPECT_THROW(build_transformer(s), Error);
  s = tiny();
  s.kv_heads = 3;  // 4 heads are not a multiple of 3
  EXPECT_THROW(build_transformer(s), Error);
  s = tiny();
  s.layers = 0;
  EXPECT_THROW(build_transformer(s), Error);
}

// The loss is the mean cross-entropy of the logits at the targets, computed here by hand; at
// initialization it lies within the logits' spread of log(vocab): with every row's logits in
// [lo, hi], each row's cross-entropy is log(V) plus a number in [-(hi - lo), hi - lo].
TEST(Transformer, InitialLossIsTheCrossEntropyOfItsLogits) {
  LanguageModel m = build_transformer(tiny());
  auto rng = testing::rng_for("transformer-loss");
  reference::Feeds f = feeds_for(m, rng);
  const std::vector<Array> out =
      reference::evaluate_nodes(*m.graph, f, std::vector<NodeId>{m.logits.id(), m.loss.id()});
  const Array& logits = out[0];
  const int64_t rows = 2 * 5, V = 11;
  double mean = 0, spread = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* z = logits.data.data() + r * V;
    const double hi = *std::max_element(z, z + V), lo = *std::min_element(z, z + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - hi);
    const auto target = static_cast<int64_t>(f.at("targets").data[static_cast<size_t>(r)]);
    mean += (hi + std::log(sum) - z[target]) / static_cast<double>(rows);
    spread = std::max(spread, hi - lo);
  }
  EXPECT_NEAR(out[1].data[0], mean, 1e-12);
  EXPECT_NEAR(out[1].data[0], std::log(static_cast<double>(V)), spread);
  EXPECT_GT(spread, 0.0);
}

TEST(Transformer, LogitsAreCausal) {
  LanguageModel m = build_transformer(tiny());
  auto rng = testing::rng_for("transformer-causal");
  reference::Feeds f = feeds_for(m, rng);
  std::vector<NodeId> ids{m.logits.id()};
  const Array before = reference::evaluate_nodes(*m.graph, f, ids)[0];
  Array& tokens = f["tokens"];
  tokens.data[3] = std::fmod(tokens.data[3] + 1, 11.0);  // batch 0, position 3
  const Array after = reference::evaluate_nodes(*m.graph, f, ids)[0];
  const int64_t L = 5, V = 11;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t l = 0; l < L; ++l) {
      double diff = 0;
      for (int64_t v = 0; v < V; ++v) {
        const size_t i = static_cast<size_t>((b * L + l) * V + v);
        diff = std::max(diff, std::abs(before.data[i] - after.data[i]));
      }
      if (b == 0 && l >= 3)
        EXPECT_GT(diff, 0.0) << "position " << l;
      else
        EXPECT_EQ(diff, 0.0) << "batch " << b << " position " << l;
    }
  }
}

TEST(Transformer, Gradcheck) {
  LanguageModel m = build_transformer(tiny());
  Graph& g = *m.graph;
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  auto grads = gradients(m.loss, params);
  auto rng = testing::rng_for("transformer-grad");
  reference::Feeds f = feeds_for(m, rng);
  // Larger weights than the initialization, so that attention and the norms are far from
  // their near-uniform, near-linear regime.
  for (const Tensor& p : params) {
    Array& a = f[g.node(p.id()).name];
    for (double& v : a.data) v *= 10;
  }
  std::vector<NodeId> ids;
  for (const Tensor& t : grads) ids.push_back(t.id());
  auto analytic = reference::evaluate_nodes(g, f, ids);
  auto loss = [&] {
    return reference::evaluate_nodes(g, f, std::vector<NodeId>{m.loss.id()})[0].data[0];
  };
  for (size_t k = 0; k < params.size(); ++k) {
    const std::string& name = g.node(params[k].id()).name;
    Array& p = f[name];
    const size_t stride = std::max<size_t>(1, p.data.size() / 5);
    for (size_t e = 0; e < p.data.size(); e += stride) {
      const double x0 = p.data[e], h = 1e-6;
      p.data[e] = x0 + h;
      const double up = loss();
      p.data[e] = x0 - h;
      const double down = loss();
      p.data[e] = x0;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[k].data[e], numeric, 1e-6 * (1 + std::abs(numeric)))
          << name << "[" << e << "]";
    }
  }
}

}  // namespace
}  // namespace mn
