#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include <meganeura/session.h>
#include <meganeura/train.h>

#include "data/atomic_file.h"
#include "train/checkpoint.h"

namespace mn {

namespace {

constexpr int32_t kPadLabel = -100;  // cross_entropy's ignore_index: padding rows add nothing

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Copies a batch into fixed-size buffers, padding a short last batch.
void fill_batch(const Batch& b, int64_t batch, int64_t sample_numel, std::vector<float>& x,
                std::vector<int32_t>& y) {
  x.assign(static_cast<size_t>(batch * sample_numel), 0.0f);
  y.assign(static_cast<size_t>(batch), kPadLabel);
  std::copy(b.inputs.begin(), b.inputs.end(), x.begin());
  std::copy(b.labels.begin(), b.labels.end(), y.begin());
}

// Correct predictions among the first `count` rows of [rows, classes] logits.
int64_t count_correct(const std::vector<float>& logits, int64_t classes,
                      const std::vector<int32_t>& labels, int64_t count) {
  int64_t correct = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float* row = logits.data() + i * classes;
    const int64_t pred = std::max_element(row, row + classes) - row;
    correct += pred == labels[static_cast<size_t>(i)];
  }
  return correct;
}

struct Evaluator {
  Classifier net;
  std::unique_ptr<Session> session;
  int64_t batch = 0;

  TrainResult run(Session& from, const Dataset& data) {
    // Parameters and the module's buffers (running statistics); the evaluation graph has no
    // optimizer state.
    for (const std::string& name : session->parameter_names()) session->set(name, from.get(name));
    for (const std::string& name : session->state_names()) session->set(name, from.get(name));
    std::vector<float> x;
    std::vector<int32_t> y;
    int64_t correct = 0;
    double loss_sum = 0;
    const int64_t classes = net.logits.dim(1);
    for (int64_t begin = 0; begin < data.size(); begin += batch) {
      const int64_t count = std::min(batch, data.size() - begin);
      x.assign(static_cast<size_t>(batch * data.sample_numel()), 0.0f);
      y.assign(static_cast<size_t>(batch), kPadLabel);
      std::copy_n(data.inputs.begin() + begin * data.sample_numel(), count * data.sample_numel(),
                  x.begin());
      std::copy_n(data.labels.begin() + begin, count, y.begin());
      session->set("x", x);
      session->set("y", y);
      session->step();
      correct += count_correct(session->get_f32("logits"), classes, y, count);
      loss_sum += session->get("loss").data[0] * static_cast<double>(count);
    }
    TrainResult r;
    r.test_accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
    r.test_loss = loss_sum / static_cast<double>(data.size());
    return r;
  }
};

// Every option means what it says: out-of-range values are errors, never replaced.
void check_options(const TrainOptions& o) {
  auto fail = [](const std::string& field, const std::string& value, const std::string& want) {
    throw Error("train_classifier: TrainOptions::" + field + " is " + value + ", expected " + want);
  };
  if (o.epochs < 1) fail("epochs", std::to_string(o.epochs), ">= 1");
  if (o.model.batch < 1) fail("model.batch", std::to_string(o.model.batch), ">= 1");
  if (o.eval_batch < 1) fail("eval_batch", std::to_string(o.eval_batch), ">= 1");
  o.optimizer.validate("train_classifier");
  // PyTorch accepts 0; a whole run at 0 trains nothing, which is never what was meant here.
  if (o.optimizer.lr == 0) fail("optimizer.lr", "0", "a positive number (nothing would train)");
}

// The run's step count must fit in int64, and gradient accumulation must reach an update.
void check_run_length(const TrainOptions& o, int64_t per_epoch) {
  if (o.epochs > std::numeric_limits<int64_t>::max() / per_epoch) {
    throw Error("train_classifier: " + std::to_string(o.epochs) + " epochs of " +
                std::to_string(per_epoch) + " steps overflow the step counter");
  }
  const int64_t total = per_epoch * o.epochs;
  if (o.optimizer.accumulate > total) {
    throw Error("train_classifier: Optimizer::accumulate is " +
                std::to_string(o.optimizer.accumulate) +
                " micro-batches per update, but the run "
                "has only " +
                std::to_string(total) + " batches: no update would ever happen");
  }
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
  add_training_step(net.loss, o.optimizer);
  SessionOptions so;
  so.device = o.device;
  so.check_numerics = o.check_numerics;
  so.precision = o.precision;
  auto session = build_session(*net.graph, so);

  Evaluator eval;
  ClassifierSpec eval_spec = o.model;
  eval_spec.batch = std::min<int64_t>(o.eval_batch, test->size());
  eval.net = build_classifier(eval_spec);
  eval.batch = eval_spec.batch;
  eval.session = build_session(*eval.net.graph, so);

  DataLoaderOptions lo;
  lo.batch_size = o.model.batch;
  lo.seed = o.shuffle_seed;
  DataLoader loader(train, lo);
  const int64_t per_epoch = loader.batches_per_epoch();
  check_run_length(o, per_epoch);
  const int64_t total = per_epoch * o.epochs;

  const int64_t acc = o.optimizer.accumulate;
  OptimizerStepper stepper(o.optimizer, (total + acc - 1) / acc);
  int64_t global_step = 0;
  if (!o.resume.empty()) {
    const train::ResumePoint at = train::load_checkpoint(*session, o, per_epoch, total);
    global_step = at.global_step;
    stepper.seek(global_step);
    loader.seek(at.next.epoch, at.next.step);
  }

  TrainResult result;
  result.device = session->device_name();
  std::vector<float> x;
  std::vector<int32_t> y;
  const auto t0 = Clock::now();
  int64_t samples = 0, epoch_correct = 0, epoch_samples = 0, epoch_steps = 0;
  double epoch_loss = 0;
  const int64_t classes = net.logits.dim(1);
  const int64_t steps_at_start = global_step;
  while (global_step < total) {
    Batch b = loader.next();
    fill_batch(b, o.model.batch, train->sample_numel(), x, y);
    session->set("x", x);
    session->set("y", y);
    // With gradient accumulation a step is one micro-batch; every `accumulate`-th one updates,
    // and the schedule and bias correction count updates (the stepper keeps the count).
    stepper.step(*session);
    ++global_step;
    const double loss = session->get("loss").data[0];
    if (!std::isfinite(loss)) {
      throw Error("training diverged: loss is " + std::to_string(loss) + " at step " +
                  std::to_string(global_step) + " (lower the learning rate?)");
    }
    epoch_correct += count_correct(session->get_f32("logits"), classes, y, b.size());
    epoch_samples += b.size();
    epoch_loss += loss;
    ++epoch_steps;
    samples += b.size();

    const bool epoch_done = loader.position().step == 0;
    TrainOptions::Progress p;
    p.epoch = b.epoch;
    p.epochs = o.epochs;
    p.step = b.step + 1;
    p.steps_per_epoch = per_epoch;
    p.global_step = global_step;
    p.loss = epoch_loss / static_cast<double>(epoch_steps);
    p.accuracy = static_cast<double>(epoch_correct) / static_cast<double>(epoch_samples);
    p.seconds = seconds_since(t0);
    p.samples_per_second = static_cast<double>(samples) / std::max(p.seconds, 1e-9);
    const double per_step = p.seconds / static_cast<double>(global_step - steps_at_start);
    p.eta_seconds = per_step * static_cast<double>(total - global_step);
    const bool stopping = o.stop_after_steps >= 0 && global_step >= o.stop_after_steps;
    if (epoch_done || global_step == total || stopping) {
      result.final_loss = p.loss;
      result.train_accuracy = p.accuracy;
    }
    if (epoch_done || global_step == total) {
      train::check_finite(*session, global_step);  // the loss predates the last update
      TrainResult e = eval.run(*session, *test);
      result.test_accuracy = e.test_accuracy;
      result.test_loss = e.test_loss;
      p.epoch_done = true;
      p.test_accuracy = e.test_accuracy;
      if (!o.save.empty())
        train::save_checkpoint(o.save, *session, o, global_step, loader.position());
    }
    if (o.on_progress) o.on_progress(p);
    if (epoch_done) {
      epoch_correct = epoch_samples = epoch_steps = 0;
      epoch_loss = 0;
    }
    if (stopping) {
      if (!o.save.empty())
        train::save_checkpoint(o.save, *session, o, global_step, loader.position());
      break;
    }
  }
  result.steps = global_step;
  result.seconds = seconds_since(t0);
  result.samples_per_second = static_cast<double>(samples) / std::max(result.seconds, 1e-9);
  return result;
}

}  // namespace mn
