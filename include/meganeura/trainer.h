#pragma once
// Training any graph with a scalar loss: batches from a TensorDataset fed to the graph's inputs
// by name, forward + backward + optimizer update as one submission per step, metrics,
// evaluation, callbacks, checkpoints with exact resume, and progress on a terminal (a bar) or
// elsewhere (JSON lines).
//
//   mn::Graph g;
//   mn::Tensor x = g.input("x", {64, 784}), y = g.input("y", {64}, mn::DType::i32);
//   mn::Tensor logits = net->forward(x);
//   g.output("logits", logits);
//   mn::Trainer trainer(mn::cross_entropy(logits, y),
//                       {.optimizer = mn::Optimizer::adamw({.lr = 1e-3}), .epochs = 3,
//                        .metrics = {mn::Metric::accuracy("logits", "y")}});
//   mn::TrainHistory h = trainer.fit(train_data, test_data);
//
// The graph's batch size is fixed (its inputs' first dimension). A short last batch is padded
// with rows whose values TrainerOptions::pad_values gives; metrics count only real rows, and a
// metric of a batch-level scalar (the mean loss) is trusted on a padded batch only when
// pad_values says how padding rows are neutralised (a label of -100 for cross_entropy).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <meganeura/distributed.h>
#include <meganeura/graph.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>

namespace mn {

// What a metric sees after one step: the batch (its first `batch.rows` rows are samples, the
// graph holds `batch_size`) and the outputs it asked for.
struct MetricInput {
  const TensorBatch& batch;
  int64_t batch_size = 0;
  const std::map<std::string, Array>& outputs;
  // TrainerOptions::pad_values was given: padding rows are taken to count for nothing in
  // values computed over the whole batch.
  bool padding_neutral = false;
};

// A metric sums (value, weight) over the batches of an epoch or an evaluation; it reports
// value / weight.
struct Metric {
  std::string name;
  std::vector<std::string> outputs;  // the graph outputs it reads
  std::function<std::pair<double, double>(const MetricInput&)> measure;

  // The mean of an output: a scalar (a mean loss) weighted by the batch's samples, or an
  // output of [batch, ...] averaged over the elements of the real rows. A scalar of a padded
  // batch includes the padding rows: an mn::Error unless padding_neutral.
  static Metric mean(const std::string& output, std::string name = "");
  // The fraction of real rows whose logits ([batch, classes]) have their largest value at the
  // label (an integer column of the data, [batch]).
  static Metric accuracy(const std::string& logits, const std::string& labels,
                         std::string name = "accuracy");
};

// An event of the run, passed to every callback; a callback may set `stop` to end the run
// after this event (a checkpoint is written first when the run saves them).
struct TrainEvent {
  enum class Kind : uint8_t { step, evaluation, epoch_end };
  Kind kind = Kind::step;
  int64_t epoch = 0;           // 0-based
  int64_t epochs = 0;
  int64_t step = 0;            // 1-based within the epoch
  int64_t steps_per_epoch = 0;
  int64_t global_step = 0;     // micro-batches run since the start of training (resume too)
  int64_t total_steps = 0;
  double lr = 0;               // the learning rate of the last update
  double loss = 0;             // the last step's loss
  // The running means of the training metrics over this epoch ("loss" always).
  std::map<std::string, double> metrics;
  // The last evaluation's metrics (empty before the first).
  std::map<std::string, double> eval_metrics;
  double seconds = 0;          // since fit() started
  double samples_per_second = 0;
  double eta_seconds = 0;
  bool stop = false;
};
using TrainCallback = std::function<void(TrainEvent&)>;
const char* train_event_name(TrainEvent::Kind k);  // "step", "evaluation", "epoch_end"

struct TrainerOptions {
  Optimizer optimizer = Optimizer::adam();  // with its learning rate and schedule
  int64_t epochs = 1;
  // Stop after this many steps (micro-batches) in all, counting those of a resumed run (-1: the
  // epochs decide). The schedule still spans the epochs.
  int64_t max_steps = -1;
  bool shuffle = true;
  uint64_t seed = 0;        // the data order of epoch e is a pure function of (seed, e)
  bool drop_last = false;   // drop each epoch's short last training batch instead of padding it
  // Values of the rows that pad a short batch, by column (other columns pad with 0). Needed
  // when the training data ends in a short batch (unless drop_last) or a batch-level metric
  // meets a short evaluation batch.
  std::map<std::string, double> pad_values;
  std::vector<Metric> metrics;       // on training steps, besides "loss"
  std::vector<Metric> eval_metrics;  // on evaluation, besides "loss"
  int64_t eval_every = 0;            // steps; 0: at the end of every epoch
  std::filesystem::path checkpoint;  // written at every epoch's end (and at a stop)
  int64_t checkpoint_every = 0;      // steps; 0: at epoch ends only
  std::filesystem::path resume;      // a checkpoint of the same run to continue from
  // Fields a resumed run must match, stored in every checkpoint (e.g. {"model", "mlp"}).
  std::map<std::string, std::string> run_identity;
  // Progress: a bar redrawn in place on a terminal, JSON lines every `log_every` steps and at
  // every evaluation and epoch end otherwise; automatic picks by whether the stream is a
  // terminal. The stream defaults to standard error.
  enum class Progress : uint8_t { automatic, bar, json, none };
  Progress progress = Progress::automatic;
  std::ostream* progress_stream = nullptr;
  int64_t log_every = 100;
  std::vector<TrainCallback> callbacks;
  SessionOptions session;  // device, precision, checks
  // Data-parallel training (connect_distributed): every rank runs this trainer on its own
  // device with a graph of its share of the batch; the data's batches are the ranks' together
  // (graph batch × ranks), rank r taking the r-th slice. Each step runs the backward pass, then
  // the gradients are averaged over the ranks (one all-reduce, on the micro-batch that updates),
  // then the update, so every rank keeps the same parameters; losses and metrics are the
  // ranks' means. Rank 0 broadcasts its weights when fit() starts, alone prints progress and
  // writes checkpoints (a checkpoint resumes with any number of ranks that divides its batch);
  // every rank evaluates the whole evaluation set. Null: this process alone.
  std::shared_ptr<Communicator> communicator;
  // With a communicator: after every update the ranks compare checksums of their parameters
  // and optimizer states, and a difference is a DistributedError naming the ranks and the
  // update (a check of the engine and of the data-parallel step; it reads every parameter back,
  // so it costs a copy of the model per update).
  bool check_ranks = false;
};

struct TrainHistory {
  struct Epoch {
    int64_t epoch = 0;
    std::map<std::string, double> metrics;       // the training metrics' means over the epoch
    std::map<std::string, double> eval_metrics;  // after the epoch (when there is eval data)
  };
  std::vector<Epoch> epochs;  // epochs completed by this fit() (a resumed one included)
  std::map<std::string, double> eval_metrics;  // the last evaluation
  int64_t steps = 0;          // global step at the end
  double seconds = 0;
  double samples_per_second = 0;
  bool stopped = false;       // a callback or max_steps ended the run early
};

class Trainer {
 public:
  // `loss` is a one-element tensor of a graph whose inputs are data columns (by name) or the
  // optimizer's step inputs; the graph gets the backward pass, the update and an output "loss".
  // `eval`: a graph over the same parameters for evaluation (modules in eval mode, any batch
  // size). Without it, evaluation runs a copy of the loss's graph taken before the update,
  // which is refused when that graph has dropout or updates state (batch-norm statistics):
  // those need a graph built in eval mode.
  Trainer(Tensor loss, TrainerOptions options, const Graph* eval = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains on `train` for the epochs of the options, evaluating on `eval` when given. A second
  // fit() continues from where the first stopped (global step and data position).
  TrainHistory fit(std::shared_ptr<const TensorDataset> train,
                   std::shared_ptr<const TensorDataset> eval = nullptr);
  // Runs the evaluation program over every sample of `data`: "loss" and the eval metrics.
  std::map<std::string, double> evaluate(const TensorDataset& data);

  // The session (programs "train" and "eval"; data-parallel, "train" is the backward pass and
  // "update" the optimizer's update): weights can be set or read between runs, e.g. by
  // nn::load_state_dict before fit().
  Session& session();
  int64_t global_step() const;
  const TrainerOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mn
