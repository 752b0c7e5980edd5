// Property: random graphs (support/random_graph.h: broadcasting elementwise chains, reductions,
// matmuls with transposes, reshapes, permutes, slices and concats, masks, f16 round trips,
// constants, a state assigned at the end) compiled by a session — optimized, lowered for the
// GPU, fused into kernels, planned into one arena — compute on the device (lavapipe in CI) what
// the float64 reference computes from the graph as written: every output, and the state after
// the step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "optimize/optimize_test_util.h"
#include "support/conditioning.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/random_graph.h"

namespace mn {
namespace {

// Values of the graph's inputs, fixed by `seed`.
reference::Feeds feeds_for(const Graph& g, const std::string& seed) {
  std::mt19937_64 rng = testing::rng_for(seed);
  return testing::random_feeds(g, rng);
}

// f32 kernels against float64: sums in another order and GPU transcendentals, within 2e-5 of
// each element's scale (testing::storage_tolerance). A graph rounding to f16 rounds an f32 value
// rather than the exact one: an element next to a rounding boundary may move one f16 unit
// (2^-11 of its magnitude), which the ops after it carry; such graphs get 2e-3.
double tolerance_for(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.type.dtype == DType::f16) return 2e-3;
  }
  return testing::storage_tolerance(DType::f32);
}

// Each graph's outputs and state against the reference; counts what was compared.
struct Counts {
  size_t outputs = 0, states = 0, kernels = 0;
};

// Every other graph with the layers' ops too (RandomGraph::Options::nn_ops).
void expect_graphs_match(int graphs, uint64_t first_seed, testing::RandomGraph::Options o,
                         Counts& n) {
  for (int i = 0; i < graphs; ++i) {
    o.nn_ops = i % 2 == 1;
    testing::RandomGraph rg(first_seed + static_cast<uint64_t>(i), o);
    rg.build();
    const Graph& g = rg.graph();
    const double tolerance = tolerance_for(g);
    const reference::Feeds feeds =
        feeds_for(g, "random-graphs-gpu/" + std::to_string(first_seed + i));
    reference::Feeds after = reference::initial_parameters(g);
    const std::map<std::string, Array> want = reference::run_step(g, feeds, after);
    std::unique_ptr<Session> s;
    try {
      s = build_session(g);
    } catch (const Error& e) {
      ADD_FAILURE() << "graph " << i << " did not compile: " << e.what() << "\n" << g.str();
      continue;
    }
    for (const auto& [name, value] : feeds) s->set(name, value);
    s->step();
    n.kernels += static_cast<size_t>(s->memory().dispatches);
    for (const auto& [name, expected] : want) {
      const Array got = s->get(name);
      ASSERT_EQ(got.shape, expected.shape) << "graph " << i << ", output " << name;
      EXPECT_TRUE(testing::elementwise_near(got, expected, tolerance))
          << "graph " << i << ", output " << name << "\n"
          << g.str();
      ++n.outputs;
    }
    for (NodeId id : g.states()) {
      const std::string& name = g.node(id).name;
      EXPECT_TRUE(testing::elementwise_near(s->get(name), after.at(name), tolerance))
          << "graph " << i << ", state " << name << " after the step\n"
          << g.str();
      ++n.states;
    }
  }
}

TEST(RandomGraphsGpu, SessionsComputeWhatTheReferenceComputes) {
  constexpr int kGraphs = 400;
  Counts n;
  expect_graphs_match(kGraphs, 20000, {}, n);
  EXPECT_GT(n.outputs, static_cast<size_t>(kGraphs));
  EXPECT_GT(n.states, static_cast<size_t>(kGraphs / 4));
  std::printf("%d graphs: %zu outputs and %zu states compared, %zu kernels launched\n", kGraphs,
              n.outputs, n.states, n.kernels);
}

// Longer chains: more for fusion to merge (pointwise DAGs with several outputs, epilogues of
// products and reductions, permutes folded into stores), more for the planner to place.
TEST(RandomGraphsGpu, LongerGraphs) {
  constexpr int kGraphs = 60;
  Counts n;
  expect_graphs_match(kGraphs, 30000, {.min_steps = 40, .max_steps = 90}, n);
  EXPECT_GT(n.kernels, static_cast<size_t>(kGraphs) * 5);
  std::printf("%d longer graphs: %zu outputs and %zu states compared, %zu kernels launched\n",
              kGraphs, n.outputs, n.states, n.kernels);
}

// Extents of 31 to 130 beside small ones: products on tiles with edges, reductions and pointwise
// kernels over several workgroups, broadcasts of large operands.
TEST(RandomGraphsGpu, WideGraphs) {
  constexpr int kGraphs = 120;
  Counts n;
  expect_graphs_match(kGraphs, 40000, {.min_steps = 4, .max_steps = 24, .wide = true}, n);
  EXPECT_GT(n.outputs, static_cast<size_t>(kGraphs));
  std::printf("%d wide graphs: %zu outputs and %zu states compared, %zu kernels launched\n",
              kGraphs, n.outputs, n.states, n.kernels);
}

// Training: the loss weighs every output's elements by fixed random weights (a plain sum would
// make some gradients vanish exactly, a norm's gamma under a sum, which f32 then leaves at its
// rounding), and one SGD step with momentum updates every parameter (add_training_step: the
// backward pass of each op the generator makes, fused and planned like the forward). The loss
// and each gradient against the reference within f32 rounding of the terms behind each element
// (testing::conditioning: a normalization's gradient cancels); the parameters and the momentum
// after the step against the reference's step of the same graph.
TEST(RandomGraphsGpu, TrainingStepsOfRandomGraphs) {
  constexpr int kGraphs = 300;  // about a third have a parameter (a matmul, a norm) to train
  size_t trained = 0, compared = 0;
  for (int i = 0; i < kGraphs; ++i) {
    testing::RandomGraph rg(
        50000 + static_cast<uint64_t>(i),
        {.min_steps = 4, .max_steps = 20, .wide = i % 3 == 0, .nn_ops = i % 2 == 1});
    rg.build();
    Graph& g = rg.graph();
    if (g.parameters().empty()) continue;
    std::mt19937_64 weights = testing::rng_for("random-graphs-gpu/loss/" + std::to_string(i));
    Tensor loss;
    for (const auto& [name, id] : g.outputs()) {
      const TensorType& t = g.node(id).type;
      if (!is_float(t.dtype)) continue;
      Tensor term = sum(g.tensor(id) * g.constant(testing::random_array(weights, t)));
      loss = loss.valid() ? loss + term : term;
    }
    const Optimizer opt = Optimizer::sgd({.lr = 0.1, .momentum = 0.9});
    add_training_step(loss, opt, {}, /*output_gradients=*/true);
    const double tolerance = tolerance_for(g);
    reference::Feeds feeds = feeds_for(g, "random-graphs-gpu/train/" + std::to_string(i));
    for (const auto& [name, value] : step_scalars(opt, 0.1, 1)) {
      feeds[name] = Array::full({}, value);
    }
    const reference::Feeds before = reference::initial_parameters(g);
    reference::Feeds after = before;
    const std::map<std::string, Array> want = reference::run_step(g, feeds, after);
    std::map<std::string, Array> terms = testing::conditioning(g, feeds);
    // A parameter after the step, w - lr·g, may cancel too: its terms are |w| and lr times the
    // gradient's; the momentum after the first step is the gradient itself.
    for (const auto& [name, w] : before) {
      const auto grad = want.find("grad/" + name);
      if (grad == want.end()) continue;
      const Array& gt = terms.at(grad->first);
      Array t = w;
      for (size_t e = 0; e < t.data.size(); ++e) {
        t.data[e] = std::abs(w.data[e]) + 0.1 * (std::abs(grad->second.data[e]) + gt.data[e]);
      }
      terms[name] = std::move(t);
      terms[name + "/momentum"] = gt;
    }
    std::unique_ptr<Session> s;
    try {
      s = build_session(g);
    } catch (const Error& e) {
      ADD_FAILURE() << "training graph " << i << " did not compile: " << e.what() << "\n"
                    << g.str();
      continue;
    }
    for (const auto& [name, value] : feeds) s->set(name, value);
    s->step();
    ++trained;
    for (const auto& [name, expected] : want) {
      EXPECT_TRUE(testing::elementwise_near(s->get(name), expected, tolerance, terms.at(name)))
          << "training graph " << i << ", output " << name << "\n"
          << g.str();
      ++compared;
    }
    for (const auto& [name, expected] : after) {
      const auto t = terms.find(name);  // a state the graph assigns itself has none
      EXPECT_TRUE(t != terms.end()
                      ? testing::elementwise_near(s->get(name), expected, tolerance, t->second)
                      : testing::elementwise_near(s->get(name), expected, tolerance))
          << "training graph " << i << ", " << name << " after the step\n"
          << g.str();
      ++compared;
    }
  }
  EXPECT_GT(trained, static_cast<size_t>(kGraphs / 5));
  std::printf("%zu training graphs: %zu gradients, outputs and persistent values compared\n",
              trained, compared);
}

}  // namespace
}  // namespace mn
