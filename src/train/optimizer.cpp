#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

namespace mn {

const char* optimizer_name(Optimizer::Kind k) {
  switch (k) {
    case Optimizer::Kind::sgd:
      return "sgd";
    case Optimizer::Kind::adam:
      return "adam";
    case Optimizer::Kind::adamw:
      return "adamw";
  }
  return "?";
}

Optimizer::Kind optimizer_from_name(const std::string& name) {
  for (auto k : {Optimizer::Kind::sgd, Optimizer::Kind::adam, Optimizer::Kind::adamw}) {
    if (name == optimizer_name(k)) return k;
  }
  throw Error("unknown optimizer '" + name + "' (expected sgd, adam or adamw)");
}

// Every hyperparameter must mean what it says: a NaN or out-of-range value is an error, never a
// silent "off" (a NaN clip threshold would disable clipping, a NaN momentum poison the state).
void Optimizer::validate(const std::string& where) const {
  auto require = [&](bool ok, const std::string& field, double value, const char* range) {
    if (!ok) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", value);
      throw Error(where + ": Optimizer::" + field + " is " + text + ", expected " + range);
    }
  };
  const auto finite = [](double v) { return std::isfinite(v); };
  // The learning rate is an f32 input: a finite double beyond f32's range would become inf.
  require(finite(lr) && lr >= 0 && lr <= std::numeric_limits<float>::max(), "lr", lr,
          "a number >= 0 representable in f32");
  require(finite(momentum) && momentum >= 0 && momentum < 1, "momentum", momentum,
          "a number in [0, 1)");
  require(finite(dampening) && dampening >= 0 && dampening <= 1, "dampening", dampening,
          "a number in [0, 1]");
  require(finite(beta1) && beta1 >= 0 && beta1 < 1, "beta1", beta1, "a number in [0, 1)");
  require(finite(beta2) && beta2 >= 0 && beta2 < 1, "beta2", beta2, "a number in [0, 1)");
  require(finite(eps) && eps > 0, "eps", eps, "a positive finite number");
  require(finite(weight_decay) && weight_decay >= 0, "weight_decay", weight_decay,
          "a finite number >= 0");
  require(finite(clip_grad_norm) && clip_grad_norm >= 0, "clip_grad_norm", clip_grad_norm,
          "a finite number >= 0 (0: off)");
  require(accumulate >= 1, "accumulate", accumulate, ">= 1");
  require(schedule.warmup >= 0, "schedule.warmup", static_cast<double>(schedule.warmup), ">= 0");
  require(schedule.step_size >= 1, "schedule.step_size", static_cast<double>(schedule.step_size),
          ">= 1");
  require(finite(schedule.gamma) && schedule.gamma > 0, "schedule.gamma", schedule.gamma,
          "a positive finite number");
  require(finite(schedule.min_lr) && schedule.min_lr >= 0, "schedule.min_lr", schedule.min_lr,
          "a finite number >= 0");
}

Optimizer Optimizer::sgd(const SgdOptions& o) {
  Optimizer opt;
  opt.kind = Kind::sgd;
  opt.lr = o.lr;
  opt.momentum = o.momentum;
  opt.dampening = o.dampening;
  opt.weight_decay = o.weight_decay;
  opt.nesterov = o.nesterov;
  opt.clip_grad_norm = o.clip_grad_norm;
  opt.accumulate = o.accumulate;
  opt.schedule = o.schedule;
  opt.validate("Optimizer::sgd");
  return opt;
}

namespace {

template <class Options>
Optimizer adam_family(Optimizer::Kind kind, const Options& o, const char* where) {
  Optimizer opt;
  opt.kind = kind;
  opt.lr = o.lr;
  opt.beta1 = o.beta1;
  opt.beta2 = o.beta2;
  opt.eps = o.eps;
  opt.weight_decay = o.weight_decay;
  opt.clip_grad_norm = o.clip_grad_norm;
  opt.accumulate = o.accumulate;
  opt.schedule = o.schedule;
  opt.validate(where);
  return opt;
}

}  // namespace

Optimizer Optimizer::adam(const AdamOptions& o) {
  return adam_family(Kind::adam, o, "Optimizer::adam");
}

Optimizer Optimizer::adamw(const AdamWOptions& o) {
  return adam_family(Kind::adamw, o, "Optimizer::adamw");
}

namespace {

struct StepScalars {
  Tensor lr, step;
  Tensor apply;                               // gates the update (accumulation in the graph)
  Tensor bias_correction1, bias_correction2;  // Adam, AdamW
};

// The step's scalar inputs; `apply` only where the graph itself accumulates micro-batches.
StepScalars step_scalar_inputs(Graph& g, const Optimizer& opt, bool gated) {
  StepScalars s{g.input(StepInputs::lr, {}), g.input(StepInputs::step, {}), {}, {}, {}};
  if (gated) s.apply = g.input(StepInputs::apply, {});
  if (opt.kind != Optimizer::Kind::sgd) {
    s.bias_correction1 = g.input(StepInputs::bias_correction1, {});
    s.bias_correction2 = g.input(StepInputs::bias_correction2, {});
  }
  return s;
}

// Keeps `old` unless this micro-batch applies the update.
Tensor gated(const StepScalars& s, Tensor updated, Tensor old) {
  return s.apply.valid() ? where(s.apply, updated, old) : updated;
}

void update_parameter(Graph& g, const Optimizer& opt, const StepScalars& s, Tensor p, Tensor grad) {
  const std::string& name = g.node(p.id()).name;
  const DType dt = p.dtype();
  // Updates compute in f32 whatever the parameter stores.
  Tensor pf = dt == DType::f32 ? p : cast(p, DType::f32);
  Tensor gf = grad.dtype() == DType::f32 ? grad : cast(grad, DType::f32);
  Tensor next;
  switch (opt.kind) {
    case Optimizer::Kind::sgd: {
      if (opt.weight_decay != 0) gf = gf + pf * opt.weight_decay;
      if (opt.momentum != 0) {
        Tensor buf = g.state(name + "/momentum", p.shape());
        Tensor first = eq(s.step, g.scalar(1.0));
        Tensor buf_new = where(first, gf, buf * opt.momentum + gf * (1.0 - opt.dampening));
        g.assign(buf, gated(s, buf_new, buf));
        gf = opt.nesterov ? gf + buf_new * opt.momentum : buf_new;
      }
      next = pf - s.lr * gf;
      break;
    }
    case Optimizer::Kind::adam:
    case Optimizer::Kind::adamw: {
      if (opt.kind == Optimizer::Kind::adamw) {
        if (opt.weight_decay != 0) pf = pf * (1.0 - s.lr * opt.weight_decay);
      } else if (opt.weight_decay != 0) {
        gf = gf + pf * opt.weight_decay;
      }
      Tensor m = g.state(name + "/exp_avg", p.shape());
      Tensor v = g.state(name + "/exp_avg_sq", p.shape());
      Tensor m_new = m * opt.beta1 + gf * (1.0 - opt.beta1);
      Tensor v_new = v * opt.beta2 + gf * gf * (1.0 - opt.beta2);
      g.assign(m, gated(s, m_new, m));
      g.assign(v, gated(s, v_new, v));
      // lr / bc1 and sqrt(bc2) are scalars: computed once, not per element.
      Tensor step_size = s.lr / s.bias_correction1;
      next = pf - step_size * m_new / (sqrt(v_new) / sqrt(s.bias_correction2) + opt.eps);
      break;
    }
  }
  if (dt != DType::f32) next = cast(next, dt);
  g.assign(p, gated(s, next, p));
}

// Clipping by the global norm (returned, when clipping) and every parameter's update.
Tensor clip_and_update(Graph& g, const Optimizer& opt, const StepScalars& s,
                       const std::vector<Tensor>& parameters, std::vector<Tensor> grads) {
  Tensor norm;
  if (opt.clip_grad_norm > 0) {
    Tensor sq;
    for (const Tensor& gr : grads) {
      Tensor term = sum(cast(gr, DType::f32) * cast(gr, DType::f32));
      sq = sq.valid() ? sq + term : term;
    }
    norm = sqrt(sq);
    Tensor coef = minimum(opt.clip_grad_norm / (norm + 1e-6), g.scalar(1.0));
    for (Tensor& gr : grads) gr = gr * (gr.dtype() == DType::f32 ? coef : cast(coef, gr.dtype()));
  }
  for (size_t i = 0; i < parameters.size(); ++i)
    update_parameter(g, opt, s, parameters[i], grads[i]);
  return norm;
}

// The parameters a step trains (`parameters`, or every parameter of the loss's graph), after
// checking the loss and the optimizer; errors start with `who`.
std::vector<Tensor> trained_parameters(const char* who, Tensor loss, const Optimizer& opt,
                                       std::vector<Tensor> parameters) {
  if (loss.numel() != 1) {
    throw ShapeError(std::string(who) + ": the loss must have one element, got " +
                     loss.type().str());
  }
  opt.validate(who);
  Graph& g = loss.graph();
  if (parameters.empty()) {
    for (NodeId id : g.parameters()) parameters.push_back(g.tensor(id));
  }
  if (parameters.empty()) throw Error(std::string(who) + ": the graph has no parameters");
  return parameters;
}

}  // namespace

std::map<std::string, double> step_scalars(const Optimizer& opt, double lr, int64_t step) {
  if (step < 1) throw Error("step_scalars: step is " + std::to_string(step) + ", expected >= 1");
  std::map<std::string, double> out = {{StepInputs::lr, lr},
                                       {StepInputs::step, static_cast<double>(step)}};
  if (opt.kind != Optimizer::Kind::sgd) {
    const double t = static_cast<double>(step);
    out[StepInputs::bias_correction1] = 1.0 - std::pow(opt.beta1, t);
    out[StepInputs::bias_correction2] = 1.0 - std::pow(opt.beta2, t);
  }
  return out;
}

TrainingStep add_training_step(Tensor loss, const Optimizer& opt, std::vector<Tensor> parameters,
                               bool output_gradients) {
  Graph& g = loss.graph();
  parameters = trained_parameters("add_training_step", loss, opt, std::move(parameters));
  TrainingStep out;
  out.loss = loss;
  out.parameters = parameters;
  out.gradients = gradients(loss, parameters);

  const StepScalars s = step_scalar_inputs(g, opt, opt.accumulate > 1);

  std::vector<Tensor> grads = out.gradients;
  if (opt.accumulate > 1) {
    // Sum micro-batch gradients in state; the update uses their mean and resets the sum.
    for (size_t i = 0; i < grads.size(); ++i) {
      const std::string& name = g.node(parameters[i].id()).name;
      Tensor acc =
          g.state(name + "/grad_accum", parameters[i].shape(), Init::zeros(), grads[i].dtype());
      Tensor total = acc + grads[i];
      g.assign(acc, where(s.apply, total * 0.0, total));
      grads[i] = total * (1.0 / opt.accumulate);
    }
  }
  out.grad_norm = clip_and_update(g, opt, s, parameters, std::move(grads));
  if (!g.find_output("loss")) g.output("loss", loss);
  if (output_gradients) {
    for (size_t i = 0; i < parameters.size(); ++i) {
      g.output("grad/" + g.node(parameters[i].id()).name, out.gradients[i]);
    }
  }
  return out;
}

SplitTrainingStep split_training_step(Tensor loss, const Optimizer& opt,
                                      std::vector<Tensor> parameters, bool weighted) {
  Graph& g = loss.graph();
  parameters = trained_parameters("split_training_step", loss, opt, std::move(parameters));
  std::vector<Tensor> grads = gradients(loss, parameters);
  if (weighted) {
    const Tensor w = g.input("grad_weight", {});
    for (Tensor& gr : grads) gr = gr * (gr.dtype() == DType::f32 ? w : cast(w, gr.dtype()));
  }

  SplitTrainingStep out;
  out.loss = loss;
  out.update = std::make_unique<Graph>();
  Graph& u = *out.update;
  std::vector<Tensor> update_parameters, means;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Node& n = g.node(parameters[i].id());
    const std::string sum_name = n.name + "/grad_accum";
    Tensor sum = g.state(sum_name, n.type.shape, Init::zeros(), grads[i].dtype());
    // One micro-batch an update: the sum is the gradient itself, no zeroing needed.
    g.assign(sum, opt.accumulate > 1 ? sum + grads[i] : grads[i]);
    out.parameters.push_back(n.name);
    out.gradient_sums.push_back(sum_name);

    // The same tensors by name in the update's graph (their values come from the session).
    update_parameters.push_back(u.parameter(n.name, n.type.shape, Init::zeros(), n.type.dtype));
    Tensor held = u.state(sum_name, n.type.shape, Init::zeros(), grads[i].dtype());
    if (opt.accumulate > 1) {
      means.push_back(held * (1.0 / opt.accumulate));
      u.assign(held, held * 0.0);
    } else {
      means.push_back(held);
    }
  }
  const StepScalars s = step_scalar_inputs(u, opt, false);
  out.grad_norm = clip_and_update(u, opt, s, update_parameters, std::move(means));
  if (out.grad_norm.valid()) u.output("grad_norm", out.grad_norm);
  if (!g.find_output("loss")) g.output("loss", loss);
  return out;
}

OptimizerStepper::OptimizerStepper(Optimizer opt, int64_t total_updates)
    : optimizer_(std::move(opt)), total_updates_(total_updates) {
  optimizer_.validate("OptimizerStepper");
  if (total_updates < 0) {
    throw Error("OptimizerStepper: total_updates is " + std::to_string(total_updates) +
                ", expected >= 0 (0: unknown)");
  }
  if (optimizer_.schedule.kind == LrSchedule::Kind::cosine && total_updates == 0) {
    throw Error("OptimizerStepper: the cosine schedule needs the run's length (total_updates)");
  }
}

double OptimizerStepper::lr() const {
  return optimizer_.lr_at(updates(), total_updates_ > 0 ? total_updates_ : updates() + 1);
}

void OptimizerStepper::set_inputs(Session& s) const {
  for (const auto& [name, value] : step_scalars(optimizer_, lr(), updates() + 1))
    s.set_scalar(name, value);
  if (optimizer_.accumulate > 1) s.set_scalar(StepInputs::apply, applies_next() ? 1.0 : 0.0);
}

void OptimizerStepper::step(Session& s) {
  set_inputs(s);
  s.step();
  advance();
}

void OptimizerStepper::seek(int64_t micro_batches) {
  if (micro_batches < 0) {
    throw Error("OptimizerStepper::seek: " + std::to_string(micro_batches) +
                " micro-batches, expected >= 0");
  }
  micro_batches_ = micro_batches;
}

}  // namespace mn
