#pragma once
// Training loop for classifiers: a step session (forward, backward and the optimizer update in
// one submission), an evaluation session, schedules, metrics, checkpoints and exact resume.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <meganeura/data.h>
#include <meganeura/distributed.h>
#include <meganeura/models.h>
#include <meganeura/optimizer.h>

namespace mn {

struct TrainOptions {
  ClassifierSpec model;  // model.batch is the training batch
  int64_t epochs = 1;
  Optimizer optimizer = Optimizer::adam();  // with its learning rate and schedule
  std::string device;                       // see SessionOptions::device
  std::optional<bool> check_numerics;       // see SessionOptions::check_numerics
  DType precision = DType::f32;             // see SessionOptions::precision
  std::filesystem::path save;               // checkpoint written after every epoch (and at the end)
  std::filesystem::path resume;             // checkpoint to continue from
  int64_t stop_after_steps = -1;            // stop early (after saving) once this many updates ran
  uint64_t shuffle_seed = 0;
  int64_t eval_batch = 1000;
  // Progress: called after every step and at the end of every epoch.
  struct Progress {
    int64_t epoch = 0, epochs = 0, step = 0, steps_per_epoch = 0, global_step = 0;
    double loss = 0, accuracy = 0, samples_per_second = 0, seconds = 0, eta_seconds = 0;
    bool epoch_done = false;
    double test_accuracy = -1;  // set on epoch_done
  };
  std::function<void(const Progress&)> on_progress;
  // Data-parallel training over the ranks (TrainerOptions::communicator): model.batch is then
  // each rank's batch, and a step of the data is model.batch × ranks samples.
  std::shared_ptr<Communicator> communicator;
  bool check_ranks = false;  // TrainerOptions::check_ranks
};

struct TrainResult {
  double test_accuracy = 0;
  double test_loss = 0;
  double final_loss = 0;  // mean training loss over the last epoch's steps
  double train_accuracy = 0;
  int64_t steps = 0;
  double seconds = 0;
  double samples_per_second = 0;
  std::string device;
};

TrainResult train_classifier(std::shared_ptr<const Dataset> train,
                             std::shared_ptr<const Dataset> test, const TrainOptions& options);

}  // namespace mn
