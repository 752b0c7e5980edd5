// Reverse-mode differentiation: accumulation over uses, blocked paths, unused parameters, and
// whole models against float64 central differences.
#include <gtest/gtest.h>

#include <cmath>

#include <meganeura/autodiff.h>
#include <meganeura/models.h>
#include <meganeura/reference.h>

#include "support/random_fill.h"

namespace mn {
namespace {

double value(const Graph& g, const reference::Feeds& f, Tensor t) {
  std::vector<NodeId> ids{t.id()};
  return reference::evaluate_nodes(g, f, ids)[0].data[0];
}

TEST(Gradients, UsesAreSummed) {
  Graph g;
  auto x = g.parameter("x", {3});
  auto loss = sum(x * x + x * 3.0);  // d/dx = 2x + 3, x used three times
  auto gx = gradients(loss, {x})[0];
  reference::Feeds f{{"x", Array({3}, DType::f32, {1, -2, 0.5})}};
  auto v = reference::evaluate_nodes(g, f, std::vector<NodeId>{gx.id()})[0];
  EXPECT_EQ(v.data, (std::vector<double>{5, -1, 4}));
}

TEST(Gradients, StopGradientAndUnusedParameters) {
  Graph g;
  auto x = g.parameter("x", {2});
  auto unused = g.parameter("unused", {4}, Init::ones());
  auto loss = sum(x * stop_gradient(x));  // gradient x, not 2x
  auto grads = gradients(loss, {x, unused});
  reference::Feeds f{{"x", Array({2}, DType::f32, {3, -1})}};
  auto v = reference::evaluate_nodes(g, f, std::vector<NodeId>{grads[0].id(), grads[1].id()});
  EXPECT_EQ(v[0].data, (std::vector<double>{3, -1}));
  EXPECT_EQ(v[1].data, (std::vector<double>(4, 0.0)));
  EXPECT_EQ(grads[1].shape(), (Shape{4}));
}

TEST(Gradients, NonScalarLossNeedsACotangent) {
  Graph g;
  auto x = g.parameter("x", {2});
  EXPECT_THROW(gradients(x * 2.0, {x}), ShapeError);
  auto ct = g.input("ct", {2});
  auto gx = gradients(x * 2.0, {x}, ct)[0];
  reference::Feeds f{{"x", Array({2}, DType::f32, {1, 1})}, {"ct", Array({2}, DType::f32, {5, 7})}};
  EXPECT_EQ(reference::evaluate_nodes(g, f, std::vector<NodeId>{gx.id()})[0].data,
            (std::vector<double>{10, 14}));
}

// The built-in models: every parameter's gradient against central differences (a sample of
// elements per parameter, to keep the test fast).
void check_model(ModelKind kind) {
  ClassifierSpec spec;
  spec.kind = kind;
  spec.batch = 3;
  spec.hidden = {8};
  Classifier c = build_classifier(spec);
  Graph& g = *c.graph;
  std::vector<Tensor> params;
  for (NodeId id : g.parameters()) params.push_back(g.tensor(id));
  auto grads = gradients(c.loss, params);
  auto rng = testing::rng_for(model_name(kind));
  reference::Feeds f = reference::initial_parameters(g);
  f["x"] = testing::random_array(rng, c.input.type(), 0.0, 1.0);
  f["y"] = testing::random_array(rng, c.labels.type(), 0, 10);
  std::vector<NodeId> ids;
  for (const Tensor& t : grads) ids.push_back(t.id());
  auto analytic = reference::evaluate_nodes(g, f, ids);
  for (size_t k = 0; k < params.size(); ++k) {
    const std::string& name = g.node(params[k].id()).name;
    Array& p = f[name];
    const size_t stride = std::max<size_t>(1, p.data.size() / 12);
    for (size_t e = 0; e < p.data.size(); e += stride) {
      const double x0 = p.data[e], h = 1e-6;
      p.data[e] = x0 + h;
      const double up = value(g, f, c.loss);
      p.data[e] = x0 - h;
      const double down = value(g, f, c.loss);
      p.data[e] = x0;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[k].data[e], numeric, 1e-6 * (1 + std::abs(numeric)))
          << name << "[" << e << "]";
    }
  }
}

TEST(Gradients, MlpModelGradcheck) { check_model(ModelKind::mlp); }
TEST(Gradients, CnnModelGradcheck) { check_model(ModelKind::cnn); }

}  // namespace
}  // namespace mn
