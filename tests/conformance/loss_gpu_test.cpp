// GPU behaviour of the loss family beyond the op table's samples, whose small shapes take the
// single-workgroup paths: many classes (a workgroup per row), many rows (per-row kernel, then a
// summing workgroup; a separate count for the mean of index targets), trailing spatial axes,
// the NaN mean when every target is ignored, and the NaN rows of out-of-range targets.
#include <cmath>

#include <gtest/gtest.h>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "gpu_compare.h"
#include "ir/ops/loss.h"
#include "support/random_fill.h"

namespace mn {
namespace {

using testing::expect_close;
using testing::run_gpu;

// The loss as an output, and its gradient w.r.t. `wrt` (of sum(loss * weights) if unreduced).
void add_outputs(Graph& g, const std::string& name, Tensor loss, Tensor wrt, Tensor weights) {
  g.output(name, loss);
  Tensor scalar = loss.shape().empty() ? loss : sum(loss * weights);
  g.output(name + "_grad", gradients(scalar, {wrt})[0]);
}

void check_cross_entropy(const Shape& logits_shape, int64_t ignore_index, double smoothing,
                         bool probs, const std::string& seed) {
  auto rng = testing::rng_for("loss-gpu/" + seed);
  Graph g;
  reference::Feeds feeds;
  const int64_t classes = logits_shape[1];
  Shape batch = logits_shape;
  batch.erase(batch.begin() + 1);
  Tensor z = g.input("z", logits_shape);
  feeds["z"] = testing::random_array(rng, {logits_shape, DType::f32}, -4.0, 4.0);
  Tensor t = probs ? g.input("t", logits_shape) : g.input("t", batch, DType::i32);
  feeds["t"] =
      probs ? testing::random_array(rng, {logits_shape, DType::f32}, 0.0, 1.0)
            : testing::random_array(rng, {batch, DType::i32}, 0.0, static_cast<double>(classes));
  Tensor weights = g.constant(testing::random_array(rng, {batch, DType::f32}, -1.0, 1.0));
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    Tensor loss = cross_entropy(z, t, {r, ignore_index, smoothing});
    add_outputs(g, std::string("ce_") + reduction_name(r), loss, z, weights);
  }
  if (probs) {
    Tensor loss = cross_entropy(z, t, {Reduction::mean, ignore_index, smoothing});
    g.output("ce_target_grad", gradients(loss, {t})[0]);
  }
  expect_close(g, feeds);
}

// A workgroup per row (C > 64).
TEST(LossGpu, CrossEntropyManyClasses) {
  check_cross_entropy({6, 300}, 7, 0.0, false, "many-classes");
  check_cross_entropy({5, 130}, -100, 0.1, false, "many-classes-smoothing");
  check_cross_entropy({4, 200}, -100, 0.2, true, "many-classes-probs");
}

TEST(LossGpu, CrossEntropyManyClassesSpatial) {
  check_cross_entropy({2, 100, 3, 2}, 1, 0.25, false, "many-classes-spatial");
}

// Too many rows for one workgroup: per-row losses into scratch, a separate count.
TEST(LossGpu, CrossEntropyManyRows) {
  check_cross_entropy({12000, 5}, 3, 0.0, false, "many-rows");
  check_cross_entropy({3000, 6, 2}, 0, 0.3, false, "many-rows-spatial");
  check_cross_entropy({9000, 4}, -100, 0.1, true, "many-rows-probs");
}

// Many rows with moderately many classes: a thread per row despite C > 64.
TEST(LossGpu, CrossEntropyManyRowsManyClasses) {
  check_cross_entropy({8192, 70}, 2, 0.0, false, "many-rows-classes");
}

TEST(LossGpu, NllLossLarge) {
  for (const Shape& shape : {Shape{300, 250}, Shape{70000, 2}, Shape{4000, 3, 5}}) {
    SCOPED_TRACE(shape_str(shape));
    auto rng = testing::rng_for("loss-gpu/nll/" + shape_str(shape));
    Graph g;
    reference::Feeds feeds;
    Shape batch = shape;
    batch.erase(batch.begin() + 1);
    Tensor x = g.input("x", shape);
    Tensor t = g.input("t", batch, DType::i32);
    feeds["x"] = testing::random_array(rng, {shape, DType::f32}, -3.0, 0.0);
    feeds["t"] =
        testing::random_array(rng, {batch, DType::i32}, 0.0, static_cast<double>(shape[1]));
    Tensor weights = g.constant(testing::random_array(rng, {batch, DType::f32}, -1.0, 1.0));
    for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
      add_outputs(g, std::string("nll_") + reduction_name(r), nll_loss(x, t, r, 1), x, weights);
    }
    expect_close(g, feeds);
  }
}

// Elementwise losses past one workgroup's share: per-element losses, then the sum.
TEST(LossGpu, ElementwiseLossesLarge) {
  auto rng = testing::rng_for("loss-gpu/elementwise");
  const Shape shape{300, 257};
  Graph g;
  reference::Feeds feeds;
  Tensor x = g.input("x", shape);
  Tensor p = g.input("p", shape);
  Tensor y = g.input("y", shape);
  feeds["x"] = testing::random_array(rng, {shape, DType::f32}, -2.0, 2.0);
  feeds["p"] = testing::random_array(rng, {shape, DType::f32}, 0.05, 0.95);
  feeds["y"] = testing::random_array(rng, {shape, DType::f32}, 0.0, 1.0);
  for (Reduction r : {Reduction::mean, Reduction::sum}) {
    const std::string s = reduction_name(r);
    add_outputs(g, "mse_" + s, mse_loss(x, y, r), x, {});
    add_outputs(g, "l1_" + s, l1_loss(x, y, r), x, {});
    add_outputs(g, "smooth_l1_" + s, smooth_l1_loss(x, y, r, 0.5), x, {});
    add_outputs(g, "bce_" + s, binary_cross_entropy(p, y, r), p, {});
    add_outputs(g, "bce_logits_" + s, binary_cross_entropy_with_logits(x, y, r), x, {});
  }
  expect_close(g, feeds);
}

// Probabilities exactly 0 and 1 hit the -100 log clamp and the 1e-12 denominator clamp.
TEST(LossGpu, BinaryCrossEntropyClamps) {
  Graph g;
  Tensor p = g.input("p", {6});
  Tensor y = g.input("y", {6});
  Tensor loss = binary_cross_entropy(p, y, Reduction::none);
  g.output("loss", loss);
  g.output("grad", gradients(sum(loss), {p})[0]);
  reference::Feeds feeds;
  feeds["p"] = Array({6}, DType::f32, {0.0, 1.0, 0.0, 1.0, 1e-30, 0.5});
  feeds["y"] = Array({6}, DType::f32, {0.0, 1.0, 1.0, 0.0, 0.25, 0.5});
  auto got = run_gpu(g, feeds);
  auto want = reference::evaluate(g, feeds);
  for (size_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    EXPECT_NEAR(got["loss"].data[i], want["loss"].data[i], 1e-5 * std::abs(want["loss"].data[i]));
    EXPECT_NEAR(got["grad"].data[i], want["grad"].data[i], 1e-5 * std::abs(want["grad"].data[i]));
  }
  EXPECT_EQ(got["loss"].data[2], 100.0);
}

// Every target ignored: the mean is 0/0 = NaN and the gradient 0, small and large.
TEST(LossGpu, AllIgnoredMeanIsNan) {
  for (const Shape& shape : {Shape{4, 3}, Shape{5000, 20}, Shape{3, 200}}) {
    SCOPED_TRACE(shape_str(shape));
    Graph g;
    Tensor z = g.input("z", shape);
    Tensor t = g.input("t", {shape[0]}, DType::i32);
    Tensor ce = cross_entropy(z, t, {Reduction::mean, 2, 0.1});
    Tensor nll = nll_loss(z, t, Reduction::mean, 2);
    g.output("ce", ce);
    g.output("nll", nll);
    g.output("ce_grad", gradients(ce, {z})[0]);
    g.output("nll_grad", gradients(nll, {z})[0]);
    auto rng = testing::rng_for("loss-gpu/ignored");
    reference::Feeds feeds;
    feeds["z"] = testing::random_array(rng, {shape, DType::f32}, -1.0, 1.0);
    feeds["t"] = Array({shape[0]}, DType::i32, std::vector<double>(shape[0], 2.0));
    auto got = run_gpu(g, feeds);
    EXPECT_TRUE(std::isnan(got["ce"].data[0]));
    EXPECT_TRUE(std::isnan(got["nll"].data[0]));
    for (double v : got["ce_grad"].data) ASSERT_EQ(v, 0.0);
    for (double v : got["nll_grad"].data) ASSERT_EQ(v, 0.0);
  }
}

// The reference rejects a target outside [0, C). With index checks off, its row gives NaN; on,
// the step raises IndexError and the row is left out (0 with no reduction).
TEST(LossGpu, OutOfRangeTargetGivesNanUncheckedAndAnErrorChecked) {
  Graph g;
  Tensor z = g.input("z", {3, 4});
  Tensor t = g.input("t", {3}, DType::i32);
  g.output("ce", cross_entropy(z, t, {Reduction::none}));
  g.output("nll", nll_loss(z, t, Reduction::none));
  reference::Feeds feeds;
  feeds["z"] = Array({3, 4}, DType::f32, std::vector<double>(12, 0.5));
  feeds["t"] = Array({3}, DType::i32, {1.0, 4.0, -1.0});
  EXPECT_THROW(reference::evaluate(g, feeds), IndexError);
  SessionOptions unchecked;
  unchecked.check_indices = false;
  auto got = run_gpu(g, feeds, unchecked);
  for (const char* name : {"ce", "nll"}) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(std::isnan(got[name].data[0]));
    EXPECT_TRUE(std::isnan(got[name].data[1]));
    EXPECT_TRUE(std::isnan(got[name].data[2]));
  }
  auto session = build_session(g);
  for (const auto& [name, value] : feeds) session->set(name, value);
  EXPECT_THROW(session->step(), IndexError);
  for (const char* name : {"ce", "nll"}) {
    SCOPED_TRACE(name);
    const Array checked = session->get(name);
    EXPECT_EQ(checked.data[0], got[name].data[0]);
    EXPECT_EQ(checked.data[1], 0.0);
    EXPECT_EQ(checked.data[2], 0.0);
  }
}

// 16-bit logits and targets: computed in f32, stored in the tensors' dtype.
TEST(LossGpu, HalfPrecisionStorage) {
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    auto rng = testing::rng_for("loss-gpu/half");
    Graph g;
    Tensor z = g.input("z", {6, 5}, t);
    Tensor idx = g.input("idx", {6}, DType::i32);
    Tensor p = g.input("p", {6, 5}, t);
    Tensor ce = cross_entropy(z, idx, {Reduction::mean, 1, 0.1});
    Tensor soft = cross_entropy(z, p, {Reduction::sum});
    Tensor mse = mse_loss(z, p, Reduction::mean);
    g.output("ce", ce);
    g.output("soft", soft);
    g.output("mse", mse);
    g.output("ce_grad", gradients(ce, {z})[0]);
    g.output("soft_grad", gradients(soft, {z, p})[1]);
    g.output("mse_grad", gradients(mse, {z})[0]);
    reference::Feeds feeds;
    feeds["z"] = testing::random_array(rng, {{6, 5}, t}, -2.0, 2.0);
    feeds["p"] = testing::random_array(rng, {{6, 5}, t}, 0.0, 1.0);
    feeds["idx"] = testing::random_array(rng, {{6}, DType::i32}, 0.0, 5.0);
    for (const char* name : {"z", "p"}) {
      for (double& v : feeds[name].data) v = round_to_dtype(v, t);
    }
    expect_close(g, feeds, t == DType::f16 ? 2e-3 : 2e-2);
  }
}

}  // namespace
}  // namespace mn
