#pragma once
// Optimizers as graph ops: the update of every parameter is appended to the step graph, so a
// training step (forward, backward, update) compiles into one submission. The learning rate and
// the step count are scalar graph inputs, so schedules never re-record anything.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <meganeura/graph.h>

namespace mn {

struct Optimizer {
  enum class Kind : uint8_t { sgd, adam, adamw };
  Kind kind = Kind::sgd;
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

  static Optimizer sgd(double momentum = 0.0, double weight_decay = 0.0, bool nesterov = false) {
    Optimizer o;
    o.momentum = momentum;
    o.weight_decay = weight_decay;
    o.nesterov = nesterov;
    return o;
  }
  static Optimizer adam(double weight_decay = 0.0) {
    Optimizer o;
    o.kind = Kind::adam;
    o.weight_decay = weight_decay;
    return o;
  }
  static Optimizer adamw(double weight_decay = 0.01) {
    Optimizer o;
    o.kind = Kind::adamw;
    o.weight_decay = weight_decay;
    return o;
  }
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

}  // namespace mn
