// What the trainer refuses: options out of range, a checkpoint destination that cannot be
// written (before any step), a run whose parameters ended non-finite (never saved), and
// checkpoints that do not belong to the run being resumed (each field named).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>

#include <meganeura/data.h>
#include <meganeura/train.h>

#include "support/random_fill.h"
#include "support/scratch_dir.h"
#include "train/checkpoint.h"

namespace mn {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Dataset> synthetic(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  return testing::random_classification(rng, n, {784}, scale);
}

TrainOptions small_run() {
  TrainOptions o;
  o.model.batch = 16;
  o.model.hidden = {8};
  o.eval_batch = 16;
  o.epochs = 1;
  return o;
}

// Runs f, expects an mn::Error whose message holds every one of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
}

TEST(TrainerChecks, OptionsOutOfRangeAreErrors) {
  auto train = synthetic(32, 1), test = synthetic(16, 2);
  auto run = [&](const std::function<void(TrainOptions&)>& change) {
    TrainOptions o = small_run();
    change(o);
    return [=] { train_classifier(train, test, o); };
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double lr : {nan, 0.0, -1.0, inf, 1e300})
    expect_error(run([=](TrainOptions& o) { o.optimizer.lr = lr; }), {"lr"});
  expect_error(run([](TrainOptions& o) { o.epochs = 0; }), {"epochs"});
  expect_error(run([](TrainOptions& o) { o.optimizer.schedule.warmup = -5; }), {"warmup", "-5"});
  expect_error(run([=](TrainOptions& o) { o.optimizer.weight_decay = nan; }), {"weight_decay"});
  expect_error(run([](TrainOptions& o) { o.optimizer.weight_decay = -1; }), {"weight_decay"});
  expect_error(run([=](TrainOptions& o) { o.optimizer.clip_grad_norm = nan; }), {"clip_grad_norm"});
  expect_error(run([](TrainOptions& o) { o.optimizer.clip_grad_norm = -1; }), {"clip_grad_norm"});
  for (double m : {nan, -0.1, 1.0}) {
    expect_error(run([=](TrainOptions& o) {
                   o.optimizer = Optimizer::sgd();
                   o.optimizer.momentum = m;
                 }),
                 {"momentum"});
  }
  // Two batches per epoch: an update needs at most 2 micro-batches.
  expect_error(run([](TrainOptions& o) { o.optimizer.accumulate = 3; }), {"accumulate", "3"});
  expect_error(run([](TrainOptions& o) { o.epochs = std::numeric_limits<int64_t>::max() / 2 + 1; }),
               {"overflow"});
}

TEST(TrainerChecks, UnwritableSaveFailsBeforeTheFirstStep) {
  test::ScratchDir dir("trainer-test");
  auto train = synthetic(32, 1), test = synthetic(16, 2);
  TrainOptions o = small_run();
  int steps = 0;
  o.on_progress = [&](const TrainOptions::Progress&) { ++steps; };
  o.save = dir / "missing/c.safetensors";
  expect_error([&] { train_classifier(train, test, o); }, {"missing"});
  fs::create_directories(dir / "is_dir");
  o.save = dir / "is_dir";
  expect_error([&] { train_classifier(train, test, o); }, {"is a directory"});
  EXPECT_EQ(steps, 0);
}

// Inputs of 1e4 and a learning rate of 1e38: the loss of the only step is finite (computed
// before the update) but the update overflows the first layer's weights.
TEST(TrainerChecks, NonFiniteParametersAfterTheLastStepAreAnErrorAndNotSaved) {
  test::ScratchDir dir("trainer-test");
  auto train = synthetic(16, 3, 1e4f), test = synthetic(16, 4);
  TrainOptions o = small_run();
  o.optimizer = Optimizer::sgd();
  o.optimizer.lr = 1e38;
  o.save = dir / "c.safetensors";
  int steps = 0;
  o.on_progress = [&](const TrainOptions::Progress& p) {
    ++steps;
    EXPECT_TRUE(std::isfinite(p.loss));
  };
  expect_error([&] { train_classifier(train, test, o); }, {"diverged", "fc", "after step 1"});
  EXPECT_EQ(steps, 0);  // failed before the epoch's report
  EXPECT_FALSE(fs::exists(o.save));
}

// A finished one-epoch run of 2 steps, saved to dir/"c.safetensors".
struct SavedRun {
  test::ScratchDir dir{"trainer-test"};
  std::shared_ptr<Dataset> train = synthetic(32, 5), test = synthetic(16, 6);
  TrainOptions o = small_run();
  fs::path path = dir / "c.safetensors";

  SavedRun() {
    o.save = path;
    o.stop_after_steps = 1;
    train_classifier(train, test, o);
    o.stop_after_steps = -1;
    o.save.clear();
    o.resume = path;
  }
  // Rewrites the checkpoint with `change` applied to its tensors and metadata.
  void rewrite(const std::function<void(std::map<std::string, Array>&,
                                        std::map<std::string, std::string>&)>& change) {
    SafetensorsReader r(path);
    std::map<std::string, Array> arrays;
    for (const auto& e : r.entries()) arrays[e.name] = r.array(e.name);
    std::map<std::string, std::string> meta = r.metadata();
    change(arrays, meta);
    save_safetensors(path, arrays, meta);
  }
  void expect_resume_error(const std::vector<std::string>& parts, const TrainOptions& with) {
    expect_error([&] { train_classifier(train, test, with); }, parts);
  }
  void expect_resume_error(const std::vector<std::string>& parts) { expect_resume_error(parts, o); }
};

using Arrays = std::map<std::string, Array>;
using Meta = std::map<std::string, std::string>;

TEST(TrainerChecks, ResumeChecksTheRunsIdentity) {
  SavedRun run;
  TrainResult ok = train_classifier(run.train, run.test, run.o);  // the checkpoint is sound
  EXPECT_EQ(ok.steps, 2);

  TrainOptions other = run.o;
  other.optimizer = Optimizer::sgd();
  run.expect_resume_error({"'optimizer' is 'adam'", "'sgd'"}, other);
  other = run.o;
  other.model.batch = 8;
  run.expect_resume_error({"'batch' is '16'", "'8'"}, other);

  run.rewrite([](Arrays&, Meta& m) { m["format"] = "meganeura-checkpoint-3"; });
  run.expect_resume_error(
      {"format", "meganeura-checkpoint-3", "meganeura-checkpoint-2", "meganeura-checkpoint-1"});
  run.rewrite([](Arrays&, Meta& m) {
    m["format"] = "meganeura-checkpoint-1";
    m.erase("model");
  });
  run.expect_resume_error({"lacks 'model'"});
  run.rewrite([](Arrays&, Meta& m) { m["model"] = "cnn"; });
  run.expect_resume_error({"'model' is 'cnn'", "'mlp'"});
}

TEST(TrainerChecks, ResumeChecksStepAndTensors) {
  SavedRun run;
  run.rewrite([](Arrays&, Meta& m) { m.erase("global_step"); });
  run.expect_resume_error({"lacks 'global_step'"});
  for (const char* bad : {"1.5", "x", "", "1 ", "99999999999999999999"}) {
    run.rewrite([&](Arrays&, Meta& m) { m["global_step"] = bad; });
    run.expect_resume_error({"'global_step' is '" + std::string(bad) + "'", "integer"});
  }
  run.rewrite([](Arrays&, Meta& m) { m["global_step"] = "1"; });

  Array bias;
  run.rewrite([&](Arrays& a, Meta&) { bias = a.at("fc1.bias"); });
  run.rewrite([&](Arrays& a, Meta&) { a["fc1.bias"] = Array(bias.shape, DType::f16, bias.data); });
  run.expect_resume_error({"'fc1.bias'", "F16", "F32"});
  run.rewrite([&](Arrays& a, Meta&) { a["fc1.bias"] = Array({1, 8}, DType::f32, bias.data); });
  run.expect_resume_error({"'fc1.bias'", "[1, 8]", "[8]"});
  run.rewrite([&](Arrays& a, Meta&) { a.erase("fc1.bias"); });
  run.expect_resume_error({"lacks tensor 'fc1.bias'"});
  run.rewrite([&](Arrays& a, Meta&) {
    a["fc1.bias"] = bias;
    a["extra"] = bias;
  });
  run.expect_resume_error({"'extra' is not part of this run"});
}

// A checkpoint of format 1 held the fully connected weights [in, out] (and their Adam moments):
// resuming it transposes them and continues exactly as from the same checkpoint in format 2.
TEST(TrainerChecks, FormatOneCheckpointsResumeWithTransposedWeights) {
  SavedRun run;
  const TrainResult from_current = train_classifier(run.train, run.test, run.o);
  auto transpose = [](const Array& a) {
    Array t({a.shape[1], a.shape[0]}, a.dtype);
    for (int64_t i = 0; i < a.shape[0]; ++i)
      for (int64_t j = 0; j < a.shape[1]; ++j)
        t.data[static_cast<size_t>(j * a.shape[0] + i)] =
            a.data[static_cast<size_t>(i * a.shape[1] + j)];
    return t;
  };
  int transposed = 0;
  run.rewrite([&](Arrays& a, Meta& m) {
    m["format"] = "meganeura-checkpoint-1";
    for (auto& [name, value] : a) {
      if (name.rfind("fc", 0) == 0 && name.find(".weight") != std::string::npos) {
        value = transpose(value);
        ++transposed;
      }
    }
  });
  EXPECT_EQ(transposed, 6);  // fc1 and fc2 weights, each with exp_avg and exp_avg_sq
  const TrainResult from_legacy = train_classifier(run.train, run.test, run.o);
  EXPECT_EQ(from_legacy.final_loss, from_current.final_loss);
  EXPECT_EQ(from_legacy.test_accuracy, from_current.test_accuracy);
  // Untransposed (a format-2 layout labelled format 1) is refused by shape.
  run.rewrite([&](Arrays& a, Meta&) { a["fc1.weight"] = transpose(a.at("fc1.weight")); });
  run.expect_resume_error({"'fc1.weight'", "[8, 784]", "[784, 8]"});
}

TEST(TrainerChecks, ResumingAFinishedRunSaysSo) {
  SavedRun run;
  TrainOptions finish = run.o;
  finish.save = run.path;
  train_classifier(run.train, run.test, finish);  // steps 2 of 2
  run.expect_resume_error({"already run 2 steps", "nothing left to train"});
  // Saved at (epoch 1, batch 0) of 2 batches per epoch: no position of a 4-batch epoch.
  TrainOptions other_data = run.o;
  other_data.epochs = 3;
  expect_error([&] { train_classifier(synthetic(64, 7), run.test, other_data); },
               {"data position (epoch 1, batch 0)", "4 batches per epoch"});
  TrainOptions more = run.o;
  more.epochs = 2;
  EXPECT_EQ(train_classifier(run.train, run.test, more).steps, 4);
}

// The metadata alone: a data position far past int64 (epoch x batches per epoch overflows) is a
// mismatch named as one, not an overflowed product that happens to equal global_step.
TEST(TrainerChecks, ResumePositionsPastInt64AreMismatches) {
  const train::RunShape o{"run.safetensors", {{"model", "mlp"}, {"optimizer", "adam"}, {"batch", "16"}}, 4, 40, 10};
  std::map<std::string, std::string> meta = {{"format", train::kCheckpointFormat},
                                             {"model", "mlp"},
                                             {"optimizer", "adam"},
                                             {"batch", "16"},
                                             {"global_step", "5"},
                                             {"next_epoch", "1"},
                                             {"next_step", "1"}};
  const train::ResumePoint r = train::resume_point(meta, o);
  EXPECT_EQ(r.global_step, 5);
  EXPECT_EQ(r.next.epoch, 1);
  // 2^62 + 1 epochs of 4 batches wrap to step 4 in 64 bits.
  meta["next_epoch"] = "4611686018427387905";
  meta["next_step"] = "0";
  meta["global_step"] = "4";
  expect_error([&] { train::resume_point(meta, o); },
               {"data position (epoch 4611686018427387905", "not step 4"});
  meta["next_epoch"] = "99999999999999999999";
  expect_error([&] { train::resume_point(meta, o); },
               {"'next_epoch'", "expected an integer"});
}

}  // namespace
}  // namespace mn
