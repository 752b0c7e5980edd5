#pragma once
// Optimizers as graph ops: the update of every parameter is appended to the step graph, so a
// training step (forward, backward, update) compiles into one submission. The learning rate and
// the step count are scalar graph inputs, so schedules never re-record anything.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/graph.h>

namespace mn {
class Session;
}

namespace mn {

// The learning rate of update t (0-based) of `total`: linear warm-up over `warmup` updates,
// then constant, step decay (×gamma every step_size updates), or cosine down to min_lr.
struct LrSchedule {
  enum class Kind : uint8_t { constant, step, cosine };
  Kind kind = Kind::constant;
  int64_t warmup = 0;
  int64_t step_size = 1000;
  double gamma = 0.1;
  double min_lr = 0.0;
  double lr_at(double base_lr, int64_t t, int64_t total) const;
};
LrSchedule::Kind schedule_from_name(const std::string& name);  // constant, step, cosine

// Hyperparameters by name, PyTorch's defaults (torch.optim.SGD, Adam, AdamW):
//   auto opt = mn::Optimizer::adamw({.lr = 3e-4, .weight_decay = 0.1});
// Every field is checked where it is used (add_training_step, OptimizerStepper, the trainers):
// a negative learning rate, a beta outside [0, 1), a NaN is an mn::Error naming the field.
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  double clip_grad_norm = 0.0;
  int accumulate = 1;
  LrSchedule schedule = {};
};
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // an L2 penalty for Adam, decoupled decay for AdamW
  double clip_grad_norm = 0.0;
  int accumulate = 1;
  LrSchedule schedule = {};
};
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double clip_grad_norm = 0.0;
  int accumulate = 1;
  LrSchedule schedule = {};
};

struct Optimizer {
  enum class Kind : uint8_t { sgd, adam, adamw };
  Kind kind = Kind::sgd;
  // The base learning rate; the schedule scales it per update (OptimizerStepper, the trainers).
  double lr = 1e-3;
  LrSchedule schedule;
  // SGD (PyTorch semantics: the momentum buffer starts as the first gradient).
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Adam / AdamW.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // L2 penalty added to the gradient (SGD, Adam) or decoupled decay (AdamW).
  double weight_decay = 0.0;
  // Clip gradients by their global L2 norm before the update (0: off), as clip_grad_norm_.
  double clip_grad_norm = 0.0;
  // Gradient accumulation: gradients of `accumulate` micro-batches are summed in state and the
  // update (with their mean) happens on the micro-batch whose `apply` input is 1.
  int accumulate = 1;

  static Optimizer sgd(const SgdOptions& o = {});
  static Optimizer adam(const AdamOptions& o = {});
  static Optimizer adamw(const AdamWOptions& o = {});

  // The learning rate of update t (0-based) of a run of `total` updates.
  double lr_at(int64_t t, int64_t total) const { return schedule.lr_at(lr, t, total); }
  // mn::Error naming the first field out of its range ("Optimizer::beta1 is 1, expected a
  // number in [0, 1)"), `where` starting the message.
  void validate(const std::string& where) const;
};

const char* optimizer_name(Optimizer::Kind k);
Optimizer::Kind optimizer_from_name(const std::string& name);  // "sgd", "adam", "adamw"

// Names of the scalar inputs a training step reads.
struct StepInputs {
  static constexpr const char* lr = "lr";        // f32 learning rate of this step
  static constexpr const char* step = "step";    // f32 1-based count of updates (bias correction)
  static constexpr const char* apply = "apply";  // f32 1 on the micro-batch that updates
  // Adam and AdamW: 1 - beta1^step and 1 - beta2^step, computed on the host in double as
  // PyTorch does (f32 pow on a GPU makes 1 - 0.999 off by ~1e-4 relative at step 1).
  static constexpr const char* bias_correction1 = "bias_correction1";
  static constexpr const char* bias_correction2 = "bias_correction2";
};

// The scalar inputs of update `step` (1-based) at learning rate `lr`, by name: lr and step,
// and the bias corrections for Adam and AdamW. (Not apply: it depends on the micro-batch.)
// For driving a step by hand; OptimizerStepper does it from the optimizer's own lr and schedule.
std::map<std::string, double> step_scalars(const Optimizer& opt, double lr, int64_t step);

struct TrainingStep {
  Tensor loss;
  std::vector<Tensor> parameters;
  std::vector<Tensor> gradients;  // of the loss, per parameter (before clipping)
  Tensor grad_norm;               // global gradient norm when clipping, else invalid
};

// Appends backward and the optimizer update of every parameter of loss's graph (or of
// `parameters` when given) and outputs "loss". Optimizer state tensors are named
// "<param>/<slot>" (momentum, exp_avg, exp_avg_sq, grad_accum).
// With output_gradients, each parameter's gradient is also an output "grad/<param>", so a
// Session can read it by name after a step.
TrainingStep add_training_step(Tensor loss, const Optimizer& opt,
                               std::vector<Tensor> parameters = {}, bool output_gradients = false);

// add_training_step split in two at the gradients, for data-parallel training (the gradients
// are averaged over processes between the two): loss's graph gets the backward pass and puts
// each parameter's gradient into the state "<param>/grad_accum" (adding it there when the
// optimizer accumulates micro-batches); `update` is a graph of the same parameters and states
// (by name: both run as programs of one session) that takes the sums' mean over the
// micro-batches, clips, updates every parameter, and zeroes the sums when accumulating. Nothing
// in it is gated by `apply`: the caller runs it once per update. Its inputs are the step
// scalars of step_scalars(); with clipping it outputs "grad_norm". The loss graph outputs "loss".
struct SplitTrainingStep {
  Tensor loss;
  std::vector<std::string> parameters;     // in the graph's order
  std::vector<std::string> gradient_sums;  // "<param>/grad_accum", one per parameter
  std::unique_ptr<Graph> update;
  Tensor grad_norm;  // of `update`, when clipping
};
// `parameters`: those to train (default: every parameter of the graph). `weighted`: the loss
// graph takes a scalar input "grad_weight" that multiplies the gradients before they enter the
// sums (a rank's share of a loss averaged over the whole batch: its own count of what the loss
// averages over, times the ranks, over the batch's count).
SplitTrainingStep split_training_step(Tensor loss, const Optimizer& opt,
                                      std::vector<Tensor> parameters = {}, bool weighted = false);

// Keeps the step counter of a training session and sets its scalar inputs before every step:
// the learning rate from the optimizer's lr and schedule, the update count and Adam's bias
// corrections, and `apply` on the micro-batch that completes an accumulation.
//
//   mn::OptimizerStepper steps(opt, total_updates);
//   for (...) { session->set("x", ...); steps.step(*session); }
//
// The counter is micro-batches run (one per step()); seek() puts it back where a checkpoint
// says a run stopped, so a resumed run continues with the same learning rates and corrections.
class OptimizerStepper {
 public:
  // `total_updates`: the run's length in updates, which the cosine schedule needs (0: unknown,
  // an mn::Error for a cosine schedule).
  explicit OptimizerStepper(Optimizer opt, int64_t total_updates = 0);

  // Sets the scalars of the next micro-batch in `s` (without stepping).
  void set_inputs(Session& s) const;
  // set_inputs, one s.step(), and counts it.
  void step(Session& s);
  // Counts a micro-batch run by the caller after set_inputs.
  void advance() { ++micro_batches_; }
  void seek(int64_t micro_batches);

  int64_t micro_batches() const { return micro_batches_; }
  int64_t updates() const { return micro_batches_ / optimizer_.accumulate; }
  bool applies_next() const { return (micro_batches_ + 1) % optimizer_.accumulate == 0; }
  // The learning rate of the next update.
  double lr() const;
  const Optimizer& optimizer() const { return optimizer_; }

 private:
  Optimizer optimizer_;
  int64_t total_updates_ = 0;
  int64_t micro_batches_ = 0;
};

}  // namespace mn
