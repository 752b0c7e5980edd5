// Fused kernels on the GPU (lavapipe in CI) against the same graphs unfused and against the
// CPU reference: random pointwise DAGs, matmul epilogues, and whole training steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "schedule/fused_and_unfused.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"
#include "support/tensor_cores.h"

namespace mn {
namespace {

// Sessions built with fusion off for the duration of a scope.
struct FusionOff {
  testing::ScopedEnv env{"MN_FUSION", "0"};
};

using Feeds = reference::Feeds;

using testing::run_fused_and_unfused;

using testing::RandomInputs;

// Fused against unfused within `tol`, and both kernels against the reference within `tol` or,
// for the outputs named in `ref_tol`, their own tolerance.
void expect_matches(const Graph& g, const Feeds& feeds, double tol, const std::string& what,
                    const std::map<std::string, double>& ref_tol = {}) {
  auto r = run_fused_and_unfused(g, feeds);
  auto ref = reference::evaluate(g, feeds);
  for (const auto& [name, expected] : ref) {
    const double rt = ref_tol.count(name) ? ref_tol.at(name) : tol;
    EXPECT_TRUE(testing::elementwise_near(r.fused.at(name), expected, rt)) << what << " " << name;
    EXPECT_TRUE(testing::elementwise_near(r.fused.at(name), r.unfused.at(name), tol))
        << what << " " << name << " fused vs unfused";
  }
  EXPECT_LT(r.fused_dispatches, r.unfused_dispatches) << what;
}

// Random DAGs of pointwise ops over operands of broadcast-compatible shapes; some intermediate
// values are outputs too (multi-output kernels), some are read by several ops.
TEST(FusedGpu, RandomPointwiseDags) {
  const std::vector<Shape> shapes = {{3, 5}, {5}, {3, 1}, {1, 5}, {}};
  using Unary = std::function<Tensor(Tensor)>;
  using Binary = std::function<Tensor(Tensor, Tensor)>;
  const std::vector<Unary> unary = {
      [](Tensor a) { return tanh(a); },      [](Tensor a) { return sigmoid(a); },
      [](Tensor a) { return relu(a); },      [](Tensor a) { return -a; },
      [](Tensor a) { return abs(a); },       [](Tensor a) { return sqrt(abs(a) + 0.5); },
      [](Tensor a) { return exp(tanh(a)); }, [](Tensor a) { return gelu(a); },
      [](Tensor a) { return a * 0.75; },     [](Tensor a) { return clamp(a, -0.5, 0.5); },
  };
  const std::vector<Binary> binary = {
      [](Tensor a, Tensor b) { return a + b; },
      [](Tensor a, Tensor b) { return a - b; },
      [](Tensor a, Tensor b) { return a * b; },
      [](Tensor a, Tensor b) { return maximum(a, b); },
      [](Tensor a, Tensor b) { return a / (b * b + 1.0); },
      [](Tensor a, Tensor b) { return where(gt(a, b), a, b * 0.5); },
  };
  for (int seed = 0; seed < 24; ++seed) {
    auto rng = testing::rng_for("fused-dag-" + std::to_string(seed));
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    Graph g;
    std::vector<Tensor> pool;
    Feeds feeds;
    for (int i = 0; i < 3; ++i) {
      const std::string name = "x" + std::to_string(i);
      const Shape& shape = shapes[i == 0 ? 0 : pick(shapes.size())];
      pool.push_back(g.input(name, shape));
      feeds[name] = testing::random_array(rng, pool.back().type(), -1.5, 1.5);
    }
    int outputs = 0;
    for (int step = 0; step < 14; ++step) {
      // Recent values are picked more often, so chains grow long and values get shared.
      auto operand = [&] {
        const size_t n = pool.size();
        return pool[pick(2) ? n - 1 - pick(std::min<size_t>(n, 3)) : pick(n)];
      };
      Tensor t = pick(2) ? unary[pick(unary.size())](operand())
                         : binary[pick(binary.size())](operand(), operand());
      pool.push_back(t);
      if (pick(4) == 0) g.output("o" + std::to_string(outputs++), t);
    }
    g.output("o" + std::to_string(outputs), pool.back());
    expect_matches(g, feeds, 2e-5, "seed " + std::to_string(seed));
  }
}

TEST(FusedGpu, MatmulEpilogues) {
  Graph g;
  Feeds feeds;
  RandomInputs input{g, feeds, testing::rng_for("fused-matmul")};
  Tensor x = input("x", {6, 10});
  Tensor w = input("w", {10, 12});
  Tensor b = input("b", {12});
  Tensor h = relu(matmul(x, w) + b);  // bias with broadcasting and an activation
  g.output("h", h);
  Tensor w2 = input("w2", {12, 12});
  g.output("residual", matmul(h, w2, false, true) * 0.5 + h);  // transposed B, residual
  Tensor v = input("v", {10});
  g.output("gemv", tanh(matmul(v, w) + b));  // the GEMV kernel
  Tensor xb = input("xb", {2, 6, 10});
  Tensor acc = input("acc", {2, 6, 12});
  g.output("batched", acc + matmul(xb, w));  // gradient-accumulation form, batched
  Tensor long_k = input("long_k", {4096});
  Tensor wk = input("wk", {4096, 3});
  Tensor bk = input("bk", {3});
  g.output("split_gemv", sigmoid(matmul(long_k, wk) - bk));  // K split over two launches
  Tensor x3 = input("x3", {5, 10});
  Tensor pre = matmul(x3, w) + b;  // two outputs of one epilogue
  g.output("two_a", relu(pre));
  g.output("two_b", pre * pre);
  // Large enough for 64×64 tiles (and for tensor cores where the device has them).
  Tensor xl = input("xl", {128, 256});
  Tensor wl = input("wl", {256, 128});
  Tensor rl = input("rl", {128, 128});
  Tensor bl = input("bl", {128});
  Tensor pre_l = matmul(xl, wl) + bl;
  g.output("large", relu(pre_l) * 0.5 + rl);
  g.output("large_sq", pre_l * pre_l);  // a second output of the tensor-core epilogue
  // Tensor cores round the large product's operands to f16: over K = 256 the worst element is
  // about 5e-3 of a tenth of the output's scale (tests/tensor_cores checks those kernels
  // against their own model); without them the product is f32 like the rest.
  const double large = testing::sessions_use_tensor_cores() ? 2e-2 : 2e-5;
  expect_matches(g, feeds, 2e-5, "matmul epilogues", {{"large", large}, {"large_sq", large}});
  auto r = run_fused_and_unfused(g, feeds);
  // Seven matmuls (the split GEMV in two launches) and seventeen pointwise ops unfused.
  EXPECT_EQ(r.unfused_dispatches, 25u);
  EXPECT_EQ(r.fused_dispatches, 8u);
}

// Products of 16-bit operands stored in 16 bits (mixed precision's form) take their consumers
// as epilogues: the accumulator rounded as the product's store would round it, then widened,
// so the values are the unfused kernels' bit for bit. A product only widened stays 16-bit.
TEST(FusedGpu, SixteenBitProductEpilogues) {
  auto rng = testing::rng_for("fused-16-bit-products");
  Graph g;
  Feeds feeds;
  auto input = [&](const std::string& name, Shape shape, DType dtype = DType::f32) {
    Tensor t = g.input(name, std::move(shape), dtype);
    Array a = testing::random_array(rng, {t.type().shape, DType::f32});
    for (double& v : a.data) v = round_to_dtype(v, dtype);
    a.dtype = dtype;
    feeds[name] = a;
    return t;
  };
  for (DType narrow : {DType::bf16, DType::f16}) {
    const std::string d = dtype_name(narrow);
    Tensor a = input("a_" + d, {6, 10}, narrow);
    Tensor b = input("b_" + d, {10, 12}, narrow);
    Tensor r = input("r_" + d, {6, 12});
    g.output("residual_" + d, cast(matmul(a, b), DType::f32) + r);
    Tensor mask = input("mask_" + d, {6, 12});
    Tensor a2 = input("a2_" + d, {6, 10}, narrow);
    g.output("masked_" + d, where(mask, cast(matmul(a2, b), DType::f32) * 0.125, mask * 0.0 - 1e4));
    // Large enough for the tiled kernel (and for tensor cores where the device has them).
    Tensor al = input("al_" + d, {128, 256}, narrow);
    Tensor bl = input("bl_" + d, {128, 256}, narrow);  // read transposed
    Tensor rl = input("rl_" + d, {128, 128});
    g.output("large_" + d, cast(matmul(al, bl, false, true), DType::f32) + rl);
    // Only widened: the product stays 16-bit, its reader widens it.
    Tensor a3 = input("a3_" + d, {6, 10}, narrow);
    g.output("widened_" + d, sum(cast(matmul(a3, b), DType::f32) * r, {1}));
    // silu(x·Wg)·(x·Wu) narrowed for the next product: an epilogue storing 16 bits.
    Tensor a4 = input("a4_" + d, {6, 10}, narrow);
    Tensor bu = input("bu_" + d, {10, 12}, narrow);
    Tensor bd = input("bd_" + d, {12, 5}, narrow);
    Tensor gated = silu(cast(matmul(a4, b), DType::f32)) * cast(matmul(a4, bu), DType::f32);
    g.output("swiglu_" + d, cast(matmul(cast(gated, narrow), bd), DType::f32));
  }
  auto r = run_fused_and_unfused(g, feeds);
  const auto ref = reference::evaluate(g, feeds);
  for (const auto& [name, expected] : ref) {
    EXPECT_EQ(r.fused.at(name).data, r.unfused.at(name).data) << name;
    // Roundings to 16 bits of f32 and f64 accumulations may differ by a unit.
    EXPECT_TRUE(testing::elementwise_near(r.fused.at(name), expected, 2e-2)) << name;
  }
  plan::PlanOptions po;
  po.device.storage_16bit = true;
  const plan::StepPlan p = plan::make_step_plan(g, po);
  int epilogues = 0, narrowing = 0;
  for (const plan::PlannedLaunch& l : p.launches) {
    const Node& n = p.graph.node(l.nodes.front());
    if (n.op_name() != "matmul") continue;
    const bool epilogue = l.kernel.name.find("+epilogue[cast") != std::string::npos;
    epilogues += epilogue;
    // A product the epilogue finishes stores its value: f32, or 16 bits where it ends in a
    // narrowing cast; one left alone, its own 16 bits.
    const DType stored = p.graph.node(l.node).type.dtype;
    if (epilogue && is_half_float(stored)) ++narrowing;
    if (!epilogue) EXPECT_EQ(stored, n.type.dtype) << l.kernel.name;
  }
  // Residual, mask and large products and the gated pair (one of its two products) per dtype;
  // the product after the pair is only widened.
  EXPECT_EQ(epilogues, 8);
  EXPECT_EQ(narrowing, 2);
}

// A product read by two pointwise kernels (the gradients of up and gate in a SwiGLU backward):
// they merge, and the product takes them as one epilogue with two outputs.
TEST(FusedGpu, AProductsReadersMergeIntoItsEpilogue) {
  Graph g;
  Feeds feeds;
  RandomInputs input{g, feeds, testing::rng_for("fused-product-readers")};
  Tensor dy = input("dy", {16, 24});
  Tensor wd = input("wd", {40, 24});
  Tensor gate = input("gate", {16, 40});
  Tensor up = input("up", {16, 40});
  Tensor dh = matmul(dy, wd, false, true);
  g.output("d_up", dh * silu(gate));
  Tensor s = sigmoid(gate);
  g.output("d_gate", dh * up * s * (1.0 + gate * (1.0 - s)));
  expect_matches(g, feeds, 2e-5, "product readers");
  const plan::StepPlan p = plan::make_step_plan(g, plan::PlanOptions{});
  ASSERT_EQ(p.launches.size(), 1u) << p.launches.front().kernel.name;
  EXPECT_NE(p.launches.front().kernel.name.find("+epilogue["), std::string::npos);
}

TEST(FusedGpu, ReductionPrologues) {
  auto rng = testing::rng_for("fused-reduce");
  Graph g;
  Feeds feeds;
  auto input = [&](const std::string& name, Shape shape) {
    Tensor t = g.input(name, std::move(shape));
    feeds[name] = testing::random_array(rng, t.type());
    return t;
  };
  Tensor x = input("x", {6, 40});
  Tensor b = input("b", {40});
  Tensor d = x - b;
  g.output("rows", rsqrt(mean(d * d, {1}) + 1e-5));     // a norm's statistics
  g.output("cols", sum(tanh(x) * b, {0}));              // columns, broadcast operand
  g.output("all", max(abs(x - 0.25)));                  // everything
  g.output("sum_to", sum_to(sigmoid(x) * x, {1, 40}));  // a broadcast's gradient
  Tensor big = input("big", {3, 50000});
  g.output("split", sum(big * big, {1}));  // long rows: partial sums and a combine launch
  g.output("min", min(exp(big * 0.5), {0}));
  expect_matches(g, feeds, 2e-5, "reduction prologues");
}

// Casts between f32, bf16 and f16 inside fused kernels, as mixed precision makes them
// (optimize/mixed_precision.h): a narrowing rounds in registers exactly as a store would, so the
// fused values equal the reference's and the unfused kernels' bit for bit where the rest of the
// group is exact; narrowed values stored from a group, 16-bit products widened by their
// consumers' kernels, and a 16-bit value summed by a reduction's prologue.
TEST(FusedGpu, CastsBetweenFloatFormats) {
  auto rng = testing::rng_for("fused-casts");
  Graph g;
  Feeds feeds;
  Tensor x = g.input("x", {7, 33});
  feeds["x"] = testing::random_array(rng, x.type());
  // Rounding in registers: 2·x is exact, so these agree exactly with the reference.
  g.output("bf16_round_trip", cast(cast(x * 2.0, DType::bf16), DType::f32));
  g.output("f16_round_trip", cast(cast(x * 2.0, DType::f16), DType::f32));
  // A narrowed value stored as a second output beside an f32 one.
  Tensor h = x * 0.5 + 1.0;
  g.output("narrow", cast(h, DType::bf16));
  g.output("wide", h * h);
  // A 16-bit product widened inside its consumer's kernel, and summed by a reduction.
  Tensor w = g.input("w", {33, 16});
  feeds["w"] = testing::random_array(rng, w.type());
  Tensor p = matmul(cast(x, DType::bf16), cast(w, DType::bf16));
  g.output("widened", relu(cast(p, DType::f32)) + 1.0);
  g.output("summed", sum(cast(p, DType::f32), {0}));
  const auto r = run_fused_and_unfused(g, feeds);
  const auto ref = reference::evaluate(g, feeds);
  for (const char* exact : {"bf16_round_trip", "f16_round_trip", "narrow"}) {
    EXPECT_EQ(r.fused.at(exact).data, ref.at(exact).data) << exact;
    EXPECT_EQ(r.fused.at(exact).data, r.unfused.at(exact).data) << exact;
  }
  // The product is rounded to bf16 on the device and not in the reference: a unit of bf16.
  for (const char* near : {"widened", "summed"}) {
    EXPECT_TRUE(testing::elementwise_near(r.fused.at(near), r.unfused.at(near), 1e-6)) << near;
    EXPECT_TRUE(testing::elementwise_near(r.fused.at(near), ref.at(near), 1e-2)) << near;
  }
  EXPECT_LT(r.fused_dispatches, r.unfused_dispatches);
}

TEST(FusedGpu, ManyOperandsSplitAtTheBindingLimit) {
  auto rng = testing::rng_for("fused-many");
  Graph g;
  Feeds feeds;
  Tensor acc;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "x" + std::to_string(i);
    Tensor x = g.input(name, {3, 7});
    feeds[name] = testing::random_array(rng, x.type());
    acc = acc.valid() ? acc * 0.5 + x : x;
  }
  g.output("y", acc);
  expect_matches(g, feeds, 2e-5, "forty operands");
}

// Squared Frobenius distance between the parameters `names` of two sets of values.
double distance2(const std::vector<std::string>& names, const std::map<std::string, Array>& a,
                 const std::map<std::string, Array>& b) {
  double d2 = 0;
  for (const std::string& name : names) {
    const Array &x = a.at(name), &y = b.at(name);
    for (size_t i = 0; i < x.data.size(); ++i)
      d2 += (x.data[i] - y.data[i]) * (x.data[i] - y.data[i]);
  }
  return d2;
}

// Training steps with fusion on and off stay together and match the float64 reference: the
// loss of every step, every parameter and state element, and the parameters' movement as a
// whole, which a missing or doubled update term would change (tolerances and measurements as
// in tests/runtime/training_test.cpp).
void expect_same_training(ModelKind kind, const Optimizer& opt) {
  const bool sgd = opt.kind == Optimizer::Kind::sgd;
  const double tol = sgd ? 5e-5 : 1e-3;
  ClassifierSpec spec;
  spec.kind = kind;
  spec.batch = 8;
  spec.hidden = {16};
  spec.seed = 3;
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, opt);
  auto fused = build_session(*c.graph);
  std::unique_ptr<Session> unfused;
  {
    FusionOff off;
    unfused = build_session(*c.graph);
  }
  EXPECT_LT(fused->memory().dispatches * 2, unfused->memory().dispatches);
  reference::Feeds persistent = reference::initial_parameters(*c.graph);
  const std::map<std::string, Array> start(persistent.begin(), persistent.end());
  auto rng = testing::rng_for(std::string("fused-train-") + model_name(kind));
  for (int step = 1; step <= 4; ++step) {
    reference::Feeds in;
    in["x"] = testing::random_array(rng, c.input.type(), 0.0, 1.0);
    in["y"] = testing::random_array(rng, c.labels.type(), 0, 10);
    for (const auto& [n, v] : step_scalars(opt, sgd ? 0.05 : 1e-3, step)) in[n] = Array::scalar(v);
    for (const auto& [name, value] : in) {
      fused->set(name, value);
      unfused->set(name, value);
    }
    fused->step();
    unfused->step();
    const double loss = reference::run_step(*c.graph, in, persistent).at("loss").data[0];
    EXPECT_NEAR(fused->get("loss").data[0], loss, 1e-5 * std::abs(loss)) << "step " << step;
    EXPECT_NEAR(fused->get("loss").data[0], unfused->get("loss").data[0], 1e-6 * std::abs(loss))
        << "step " << step << " fused vs unfused";
  }
  std::map<std::string, Array> got, ref, plain;
  for (const std::string& name : fused->parameter_names()) {
    got[name] = fused->get(name);
    ref[name] = persistent.at(name);
    plain[name] = unfused->get(name);
  }
  for (const std::string& name : fused->state_names()) {
    got[name] = fused->get(name);
    ref[name] = persistent.at(name);
    plain[name] = unfused->get(name);
  }
  for (const auto& [name, value] : got) {
    EXPECT_TRUE(testing::elementwise_near(value, ref.at(name), tol)) << name;
    EXPECT_TRUE(testing::elementwise_near(value, plain.at(name), tol))
        << name << " fused vs unfused";
  }
  const auto names = fused->parameter_names();
  EXPECT_LE(std::sqrt(distance2(names, got, ref)), 1e-4 * std::sqrt(distance2(names, ref, start)));
}

TEST(FusedGpu, MlpAdamTraining) { expect_same_training(ModelKind::mlp, Optimizer::adam()); }
TEST(FusedGpu, MlpSgdTraining) {
  expect_same_training(ModelKind::mlp,
                       Optimizer::sgd({.momentum = 0.9, .weight_decay = 1e-4, .nesterov = true}));
}
TEST(FusedGpu, CnnAdamWTraining) {
  expect_same_training(ModelKind::cnn, Optimizer::adamw({.weight_decay = 0.01}));
}

TEST(FusedGpu, ClippedAccumulatedAdam) {
  Optimizer opt = Optimizer::adam({.weight_decay = 1e-3});
  opt.clip_grad_norm = 0.5;
  opt.accumulate = 2;
  ClassifierSpec spec;
  spec.batch = 4;
  spec.hidden = {8};
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, opt);
  auto fused = build_session(*c.graph);
  reference::Feeds persistent = reference::initial_parameters(*c.graph);
  auto rng = testing::rng_for("fused-clip");
  for (int step = 1; step <= 4; ++step) {
    reference::Feeds in;
    in["x"] = testing::random_array(rng, c.input.type(), 0.0, 1.0);
    in["y"] = testing::random_array(rng, c.labels.type(), 0, 10);
    for (const auto& [n, v] : step_scalars(opt, 1e-2, (step + 1) / 2)) in[n] = Array::scalar(v);
    in["apply"] = Array::scalar(step % 2 == 0 ? 1.0 : 0.0);
    for (const auto& [name, value] : in) fused->set(name, value);
    fused->step();
    const double loss = reference::run_step(*c.graph, in, persistent).at("loss").data[0];
    EXPECT_NEAR(fused->get("loss").data[0], loss, 1e-5 * std::abs(loss)) << "step " << step;
  }
  for (const std::string& name : fused->parameter_names()) {
    EXPECT_TRUE(testing::elementwise_near(fused->get(name), persistent.at(name), 1e-3)) << name;
  }
}

}  // namespace
}  // namespace mn
