// train_classifier: the built-in MLP and CNN classifiers trained by the generic Trainer, with
// the classifier's options, checkpoint identity ("model") and progress reports.
#include <algorithm>
#include <string>

#include <meganeura/train.h>
#include <meganeura/trainer.h>

#include "data/atomic_file.h"

namespace mn {

namespace {

constexpr int32_t kPadLabel = -100;  // cross_entropy's ignore_index: padding rows add nothing

// Every option means what it says: out-of-range values are errors, never replaced.
void check_options(const TrainOptions& o) {
  auto fail = [](const std::string& field, const std::string& value, const std::string& want) {
    throw Error("train_classifier: TrainOptions::" + field + " is " + value + ", expected " + want);
  };
  if (o.epochs < 1) fail("epochs", std::to_string(o.epochs), ">= 1");
  if (o.model.batch < 1) fail("model.batch", std::to_string(o.model.batch), ">= 1");
  if (o.eval_batch < 1) fail("eval_batch", std::to_string(o.eval_batch), ">= 1");
  o.optimizer.validate("train_classifier");
  if (o.optimizer.lr == 0) fail("optimizer.lr", "0", "a positive number (nothing would train)");
}

// The Trainer's events as the classifier's progress reports: one per step, the last step of an
// epoch reported after its evaluation (epoch_done, with the test accuracy).
TrainCallback progress_reports(const TrainOptions& o, TrainResult& result) {
  return [&o, &result](TrainEvent& e) {
    const auto metric = [&](const std::map<std::string, double>& m, const char* name) {
      auto it = m.find(name);
      return it == m.end() ? 0.0 : it->second;
    };
    TrainOptions::Progress p;
    p.epoch = e.epoch;
    p.epochs = e.epochs;
    p.step = e.step;
    p.steps_per_epoch = e.steps_per_epoch;
    p.global_step = e.global_step;
    p.loss = metric(e.metrics, "loss");
    p.accuracy = metric(e.metrics, "accuracy");
    p.seconds = e.seconds;
    p.samples_per_second = e.samples_per_second;
    p.eta_seconds = e.eta_seconds;
    if (e.kind == TrainEvent::Kind::evaluation) {
      result.test_accuracy = metric(e.eval_metrics, "accuracy");
      result.test_loss = metric(e.eval_metrics, "loss");
      return;
    }
    result.final_loss = p.loss;
    result.train_accuracy = p.accuracy;
    if (e.kind == TrainEvent::Kind::epoch_end) {
      p.epoch_done = true;
      p.test_accuracy = result.test_accuracy;
    } else if (e.step == e.steps_per_epoch) {
      return;  // reported with the epoch's end
    }
    if (o.on_progress) o.on_progress(p);
  };
}

}  // namespace

TrainResult train_classifier(std::shared_ptr<const Dataset> train,
                             std::shared_ptr<const Dataset> test, const TrainOptions& o) {
  if (!train || !test) throw Error("train_classifier: missing data set");
  if (train->size() < 1 || test->size() < 1) {
    throw Error("train_classifier: empty data set (" + std::to_string(train->size()) +
                " training, " + std::to_string(test->size()) + " test samples)");
  }
  check_options(o);
  // A checkpoint that cannot be written fails now, not after the first epoch has trained.
  if (!o.save.empty()) data::AtomicFile::check_destination(o.save);
  Classifier net = build_classifier(o.model);
  if (train->sample_shape != net.sample_shape || test->sample_shape != net.sample_shape) {
    throw ShapeError("train_classifier: the " + std::string(model_name(o.model.kind)) +
                     " model takes samples of shape " + shape_str(net.sample_shape) +
                     ", the data has " + shape_str(train->sample_shape));
  }
  ClassifierSpec eval_spec = o.model;
  eval_spec.batch = std::min<int64_t>(o.eval_batch, test->size());
  eval_spec.training = false;
  Classifier eval_net = build_classifier(eval_spec);

  TrainResult result;
  TrainerOptions to;
  to.optimizer = o.optimizer;
  to.epochs = o.epochs;
  if (o.stop_after_steps >= 0) to.max_steps = std::max<int64_t>(1, o.stop_after_steps);
  to.seed = o.shuffle_seed;
  to.pad_values = {{"y", kPadLabel}};
  to.metrics = {Metric::accuracy("logits", "y")};
  to.eval_metrics = {Metric::accuracy("logits", "y")};
  to.checkpoint = o.save;
  to.resume = o.resume;
  to.run_identity = {{"model", model_name(o.model.kind)}};
  to.progress = TrainerOptions::Progress::none;
  to.callbacks = {progress_reports(o, result)};
  to.session.device = o.device;
  to.session.check_numerics = o.check_numerics;
  to.session.precision = o.precision;
  to.communicator = o.communicator;
  to.check_ranks = o.check_ranks;
  Trainer trainer(net.loss, std::move(to), eval_net.graph.get());
  result.device = trainer.session().device_name();
  const TrainHistory h =
      trainer.fit(std::make_shared<TensorDataset>(TensorDataset::from_dataset(*train)),
                  std::make_shared<TensorDataset>(TensorDataset::from_dataset(*test)));
  result.steps = h.steps;
  result.seconds = h.seconds;
  result.samples_per_second = h.samples_per_second;
  return result;
}

}  // namespace mn
