// The training loop's own arithmetic against oracles it does not share: the learning-rate
// schedules (their closed forms), gradient accumulation (K micro-batches of B update exactly as
// one batch of K·B, the schedule counting updates), the first step's loss and the test accuracy
// (the float64 reference on the same parameters), the progress reports, the option checks not
// covered by trainer_checks_test.cpp, and a run whose loss turns non-finite mid-way.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/models.h>
#include <meganeura/reference.h>
#include <meganeura/train.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

// ---- schedules ----

TEST(LrSchedule, ConstantWithLinearWarmup) {
  LrSchedule s;
  EXPECT_EQ(s.lr_at(0.1, 0, 10), 0.1);
  EXPECT_EQ(s.lr_at(0.1, 9, 10), 0.1);
  s.warmup = 4;  // updates 0..3 ramp up to the base rate: (t + 1) / warmup of it
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 0, 10), 0.025);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 2, 10), 0.075);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 3, 10), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 4, 10), 0.1);
}

TEST(LrSchedule, StepDecayCountsFromTheEndOfWarmup) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::step;
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 9, 100), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 10, 100), 0.05);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 25, 100), 0.025);
  s.warmup = 5;
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 4, 100), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 14, 100), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(0.1, 15, 100), 0.05);
}

// PyTorch's CosineAnnealingLR with T_max = the updates after warm-up:
// min + (base - min)·(1 + cos(π·t / T_max)) / 2, held at min past T_max.
TEST(LrSchedule, CosineFollowsItsClosedForm) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::cosine;
  s.min_lr = 0.01;
  const double base = 0.1;
  for (int64_t t : {0, 1, 25, 50, 99}) {
    const double want =
        0.01 + (base - 0.01) * (1 + std::cos(std::numbers::pi * static_cast<double>(t) / 100)) / 2;
    EXPECT_NEAR(s.lr_at(base, t, 100), want, 1e-15) << t;
  }
  EXPECT_NEAR(s.lr_at(base, 50, 100), 0.055, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(base, 100, 100), 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(base, 150, 100), 0.01);
  s.warmup = 10;  // T_max = 100 after 10 warm-up updates
  EXPECT_DOUBLE_EQ(s.lr_at(base, 9, 110), base);
  EXPECT_DOUBLE_EQ(s.lr_at(base, 10, 110), base);
  EXPECT_NEAR(s.lr_at(base, 60, 110), 0.055, 1e-15);
}

TEST(LrSchedule, NamesAndUnknownNames) {
  EXPECT_EQ(schedule_from_name("constant"), LrSchedule::Kind::constant);
  EXPECT_EQ(schedule_from_name("step"), LrSchedule::Kind::step);
  EXPECT_EQ(schedule_from_name("cosine"), LrSchedule::Kind::cosine);
  for (const char* bad : {"linear", "Cosine", ""}) {
    try {
      schedule_from_name(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

// ---- the loop ----

// n samples of 784 values in [0, 1) and labels in 0..9; with `same`, every sample is the first.
std::shared_ptr<Dataset> data(int64_t n, uint64_t seed, bool same = false) {
  std::mt19937_64 rng(seed);
  auto d = testing::random_classification(rng, n, {784});
  if (same) {
    for (int64_t i = 1; i < n; ++i) {
      std::copy_n(d->inputs.begin(), 784, d->inputs.begin() + i * 784);
      d->labels[static_cast<size_t>(i)] = d->labels[0];
    }
  }
  return d;
}

TrainOptions small_run() {
  TrainOptions o;
  o.model.batch = 16;
  o.model.hidden = {8};
  o.model.seed = 4;
  o.eval_batch = 16;
  o.optimizer = Optimizer::sgd({.momentum = 0.9});
  o.optimizer.lr = 0.1;
  return o;
}

// The parameters a finished run saved.
std::map<std::string, Array> saved(const std::filesystem::path& file) {
  std::map<std::string, Array> params;
  for (const auto& [name, value] : load_safetensors(file)) {
    if (name.find('/') == std::string::npos) params[name] = value;  // not optimizer state
  }
  return params;
}

// Two micro-batches of 16 accumulated, and one batch of 32, over the same 32 samples: every
// update sees the same mean gradient, so the parameters after two epochs (two updates) agree to
// f32 rounding. The cosine schedule over two updates gives them different rates, which only
// agree if the schedule counts updates, not micro-batches.
TEST(TrainerLoop, AccumulatedMicroBatchesUpdateLikeOneBatch) {
  test::ScratchDir dir("trainer-loop");
  auto train = data(32, 1), test = data(16, 2);
  TrainOptions o = small_run();
  o.epochs = 2;
  o.optimizer.schedule.kind = LrSchedule::Kind::cosine;
  TrainOptions whole = o, micro = o;
  whole.model.batch = 32;
  whole.save = dir / "whole.safetensors";
  micro.optimizer.accumulate = 2;
  micro.save = dir / "micro.safetensors";
  std::vector<TrainOptions::Progress> reports;
  micro.on_progress = [&](const TrainOptions::Progress& p) { reports.push_back(p); };
  const TrainResult a = train_classifier(train, test, whole);
  const TrainResult b = train_classifier(train, test, micro);
  EXPECT_EQ(a.steps, 2);
  EXPECT_EQ(b.steps, 4);  // micro-batches
  ASSERT_EQ(reports.size(), 4u);
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].global_step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(reports[i].steps_per_epoch, 2);
    EXPECT_EQ(reports[i].step, static_cast<int64_t>(i % 2 + 1));
    EXPECT_EQ(reports[i].epoch_done, i % 2 == 1);
  }
  const auto pa = saved(whole.save), pb = saved(micro.save);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& [name, value] : pa) {
    EXPECT_TRUE(testing::elementwise_near(pb.at(name), value, 1e-5)) << name;
  }
  // The same run without accumulation takes four updates: visibly elsewhere.
  TrainOptions four = o;
  four.save = dir / "four.safetensors";
  train_classifier(train, test, four);
  const auto pc = saved(four.save);
  EXPECT_FALSE(testing::elementwise_near(pc.at("fc1.weight"), pa.at("fc1.weight"), 1e-3));
}

// Every sample the same: the first step's loss is that sample's cross-entropy under the
// initial parameters, whatever the shuffle; the reference computes it in float64.
TEST(TrainerLoop, FirstLossIsTheReferenceLossOfTheInitialParameters) {
  auto train = data(32, 3, /*same=*/true), test = data(16, 4);
  TrainOptions o = small_run();
  std::vector<double> losses;
  o.on_progress = [&](const TrainOptions::Progress& p) { losses.push_back(p.loss); };
  train_classifier(train, test, o);
  ASSERT_EQ(losses.size(), 2u);
  ClassifierSpec spec = o.model;
  Classifier c = build_classifier(spec);
  reference::Feeds feeds;
  feeds["x"] = Array({16, 784}, DType::f32,
                     std::vector<double>(train->inputs.begin(), train->inputs.begin() + 16 * 784));
  feeds["y"] = Array({16}, DType::i32, std::vector<double>(16, train->labels[0]));
  const double want = reference::evaluate(*c.graph, feeds).at("loss").data[0];
  EXPECT_NEAR(losses[0], want, 1e-5 * want);
  // The second report is the mean of both steps' losses; the update lowered the second.
  EXPECT_LT(losses[1], losses[0]);
}

// The test accuracy is the share of test samples whose largest logit, under the saved
// parameters, is their label: 40 samples in evaluation batches of 16 (the last one padded).
TEST(TrainerLoop, TestAccuracyIsTheReferencesPredictions) {
  test::ScratchDir dir("trainer-loop");
  auto train = data(64, 5), test = data(40, 6);
  TrainOptions o = small_run();
  o.epochs = 2;
  o.save = dir / "c.safetensors";
  double reported = -1;
  o.on_progress = [&](const TrainOptions::Progress& p) {
    if (p.epoch_done) reported = p.test_accuracy;
  };
  const TrainResult r = train_classifier(train, test, o);
  EXPECT_EQ(reported, r.test_accuracy);
  ClassifierSpec spec = o.model;
  spec.batch = test->size();
  Classifier c = build_classifier(spec);
  reference::Feeds feeds;
  for (const auto& [name, value] : saved(o.save)) feeds[name] = value;
  feeds["x"] = Array({test->size(), 784}, DType::f32,
                     std::vector<double>(test->inputs.begin(), test->inputs.end()));
  feeds["y"] = Array({test->size()}, DType::i32,
                     std::vector<double>(test->labels.begin(), test->labels.end()));
  const Array logits = reference::evaluate_nodes(*c.graph, feeds, std::vector{c.logits.id()})[0];
  int correct = 0;
  for (int64_t i = 0; i < test->size(); ++i) {
    const double* row = logits.data.data() + i * 10;
    correct += std::max_element(row, row + 10) - row == test->labels[static_cast<size_t>(i)];
  }
  EXPECT_EQ(r.test_accuracy, correct / 40.0);
  EXPECT_GT(correct, 0);  // 0 would also agree with a broken evaluation that counts nothing
}

// Inputs of 1e4 and a learning rate of 1e38: the first update overflows the weights, so the
// second step's loss is not finite and the run stops there, naming the step.
TEST(TrainerLoop, LossTurningNonFiniteStopsTheRun) {
  auto train = data(32, 7), test = data(16, 8);
  for (float& v : train->inputs) v *= 1e4f;
  TrainOptions o = small_run();
  o.optimizer = Optimizer::sgd();
  o.optimizer.lr = 1e38;
  int reports = 0;
  o.on_progress = [&](const TrainOptions::Progress&) { ++reports; };
  try {
    train_classifier(train, test, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training diverged: loss is"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at step 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(reports, 1);
}

TEST(TrainerLoop, MoreOptionsOutOfRangeAreErrors) {
  auto train = data(32, 9), test = data(16, 10);
  auto expect_error = [&](const std::function<void(TrainOptions&)>& change, const char* part) {
    TrainOptions o = small_run();
    change(o);
    try {
      train_classifier(train, test, o);
      ADD_FAILURE() << "no error mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error([](TrainOptions& o) { o.model.batch = 0; }, "model.batch");
  expect_error([](TrainOptions& o) { o.eval_batch = 0; }, "eval_batch");
  expect_error([](TrainOptions& o) { o.optimizer.schedule.step_size = 0; }, "schedule.step_size");
  expect_error([](TrainOptions& o) { o.optimizer.schedule.gamma = 0; }, "schedule.gamma");
  expect_error([=](TrainOptions& o) { o.optimizer.schedule.gamma = nan; }, "schedule.gamma");
  expect_error([](TrainOptions& o) { o.optimizer.schedule.min_lr = -1; }, "schedule.min_lr");
  TrainOptions o = small_run();
  EXPECT_THROW(train_classifier(std::make_shared<Dataset>(train->slice(0, 0)), test, o), Error);
  auto images = std::make_shared<Dataset>(*train);
  images->sample_shape = {1, 28, 28};
  EXPECT_THROW(train_classifier(images, test, o), ShapeError);  // an MLP takes {784}
}

}  // namespace
}  // namespace mn
