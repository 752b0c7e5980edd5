// Training on the GPU against the CPU reference, checkpoint round trips, exact resume, and the
// memory plan under poisoning of freed intermediates.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <meganeura/data.h>
#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>
#include <meganeura/train.h>

#include "support/random_fill.h"

namespace mn {
namespace {

// 20 optimizer steps of a model on the GPU and in the float64 reference (parameters stored at
// f32 after each step in both). Tolerance, relative to the largest magnitude of each tensor:
// 1e-4 for SGD, where f32 kernels drift from the exact path by accumulated rounding; 5e-3 for
// Adam(W), whose update m/(sqrt(v)+eps) turns f32 rounding of near-zero gradients (inputs that
// barely reach the loss, ReLU units at the edge of dying) into differences of a sizeable fraction
// of the learning rate (measured: 3.3e-4 on the MLP's first layer, 2.9e-3 on the CNN's fc1).
void expect_same_training(ModelKind kind, const Optimizer& opt, bool poison = false) {
  const double tol = opt.kind == Optimizer::Kind::sgd ? 1e-4 : 5e-3;
  ClassifierSpec spec;
  spec.kind = kind;
  spec.batch = 8;
  spec.hidden = {16};
  spec.seed = 7;
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, opt);
  SessionOptions so;
  so.poison_freed = poison;
  auto session = build_session(*c.graph, so);
  reference::Feeds persistent = reference::initial_parameters(*c.graph);
  auto rng = testing::rng_for(std::string("train-") + model_name(kind));
  for (int step = 1; step <= 20; ++step) {
    reference::Feeds in;
    in["x"] = testing::random_array(rng, c.input.type(), 0.0, 1.0);
    in["y"] = testing::random_array(rng, c.labels.type(), 0, 10);
    for (const auto& [n, v] :
         step_scalars(opt, opt.kind == Optimizer::Kind::sgd ? 0.05 : 1e-3, step))
      in[n] = Array::scalar(v);
    for (const auto& [name, value] : in) session->set(name, value);
    session->step();
    auto out = reference::run_step(*c.graph, in, persistent);
    EXPECT_NEAR(session->get("loss").data[0], out["loss"].data[0],
                1e-4 * (1 + std::abs(out["loss"].data[0])))
        << "step " << step;
  }
  for (const std::string& name : session->parameter_names()) {
    EXPECT_LE(testing::relative_error(session->get(name), persistent.at(name)), tol) << name;
  }
  for (const std::string& name : session->state_names()) {
    EXPECT_LE(testing::relative_error(session->get(name), persistent.at(name)), tol) << name;
  }
}

Optimizer sgd_momentum() { return Optimizer::sgd(0.9, 1e-4, true); }

TEST(Training, MlpSgdMomentumMatchesReference) {
  expect_same_training(ModelKind::mlp, sgd_momentum());
}
TEST(Training, MlpAdamWMatchesReference) {
  expect_same_training(ModelKind::mlp, Optimizer::adamw(0.01));
}
TEST(Training, CnnSgdMomentumMatchesReference) {
  expect_same_training(ModelKind::cnn, sgd_momentum());
}
TEST(Training, CnnAdamWMatchesReference) {
  expect_same_training(ModelKind::cnn, Optimizer::adamw(0.01));
}

// Every freed intermediate is overwritten with NaNs after its last use: if the planner let two
// live tensors share bytes, results would turn to NaN or differ from the reference.
TEST(Training, MemoryPlanSurvivesPoisoning) {
  expect_same_training(ModelKind::mlp, Optimizer::adam(), /*poison=*/true);
  expect_same_training(ModelKind::cnn, sgd_momentum(), /*poison=*/true);
}

std::shared_ptr<Dataset> synthetic(int64_t n, uint64_t seed) {
  auto d = std::make_shared<Dataset>();
  d->sample_shape = {784};
  auto rng = testing::rng_for("data" + std::to_string(seed));
  std::uniform_real_distribution<float> u(0, 1);
  d->inputs.resize(static_cast<size_t>(n * 784));
  for (float& v : d->inputs) v = u(rng);
  for (int64_t i = 0; i < n; ++i) d->labels.push_back(static_cast<int32_t>(rng() % 10));
  for (int i = 0; i < 10; ++i) d->class_names.push_back("c" + std::to_string(i));
  return d;
}

TEST(Training, ResumeContinuesExactly) {
  auto train = synthetic(200, 1), test = synthetic(50, 2);  // 4 batches per epoch, last one short
  const auto dir = std::filesystem::temp_directory_path() / "mn_resume_test";
  std::filesystem::create_directories(dir);
  TrainOptions o;
  o.model.batch = 64;
  o.model.hidden = {32};
  o.epochs = 2;
  o.optimizer = Optimizer::adamw(0.01);
  o.lr = 1e-2;
  o.schedule.kind = LrSchedule::Kind::cosine;
  o.eval_batch = 25;
  o.save = dir / "full.safetensors";
  TrainResult full = train_classifier(train, test, o);

  TrainOptions first = o;
  first.save = dir / "part.safetensors";
  first.stop_after_steps = 3;
  train_classifier(train, test, first);
  TrainOptions second = o;
  second.resume = dir / "part.safetensors";
  second.save = dir / "resumed.safetensors";
  TrainResult resumed = train_classifier(train, test, second);

  EXPECT_EQ(full.steps, 8);
  EXPECT_EQ(resumed.steps, 8);
  auto a = load_safetensors(dir / "full.safetensors");
  auto b = load_safetensors(dir / "resumed.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, value] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_EQ(value.data, b.at(name).data) << name << " differs after resuming";
  }
  EXPECT_EQ(full.test_accuracy, resumed.test_accuracy);
  std::filesystem::remove_all(dir);
}

TEST(Training, CheckpointRoundTripAndBadResume) {
  auto train = synthetic(64, 3), test = synthetic(16, 4);
  const auto dir = std::filesystem::temp_directory_path() / "mn_ckpt_test";
  std::filesystem::create_directories(dir);
  TrainOptions o;
  o.model.batch = 32;
  o.model.hidden = {8};
  o.eval_batch = 16;
  o.save = dir / "c.safetensors";
  train_classifier(train, test, o);
  SafetensorsReader r(o.save);
  EXPECT_EQ(r.metadata().at("model"), "mlp");
  EXPECT_TRUE(r.contains("fc1.weight"));
  EXPECT_TRUE(r.contains("fc1.weight/exp_avg_sq"));
  EXPECT_EQ(r.metadata().at("global_step"), "2");

  TrainOptions wrong = o;
  wrong.resume = dir / "missing.safetensors";
  EXPECT_THROW(train_classifier(train, test, wrong), FormatError);
  TrainOptions cnn = o;
  cnn.model.kind = ModelKind::cnn;
  cnn.resume = o.save;
  auto train_img = std::make_shared<Dataset>(*train);
  train_img->sample_shape = {1, 28, 28};
  auto test_img = std::make_shared<Dataset>(*test);
  test_img->sample_shape = {1, 28, 28};
  EXPECT_THROW(train_classifier(train_img, test_img, cnn), Error);  // checkpoint of another model
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mn
