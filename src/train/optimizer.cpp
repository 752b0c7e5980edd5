#include <cmath>
#include <string>

#include <meganeura/autodiff.h>
#include <meganeura/optimizer.h>

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

namespace {

// Every hyperparameter must mean what it says: a NaN or out-of-range value is an error, never a
// silent "off" (a NaN clip threshold would disable clipping, a NaN momentum poison the state).
void check_hyperparameters(const Optimizer& o) {
  auto require = [](bool ok, const char* field, double value, const char* range) {
    if (!ok) {
      throw Error("add_training_step: Optimizer::" + std::string(field) + " is " +
                  std::to_string(value) + ", expected " + range);
    }
  };
  const auto finite = [](double v) { return std::isfinite(v); };
  require(finite(o.momentum) && o.momentum >= 0 && o.momentum < 1, "momentum", o.momentum,
          "a number in [0, 1)");
  require(finite(o.dampening) && o.dampening >= 0 && o.dampening <= 1, "dampening", o.dampening,
          "a number in [0, 1]");
  require(finite(o.beta1) && o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1, "a number in [0, 1)");
  require(finite(o.beta2) && o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2, "a number in [0, 1)");
  require(finite(o.eps) && o.eps > 0, "eps", o.eps, "a positive finite number");
  require(finite(o.weight_decay) && o.weight_decay >= 0, "weight_decay", o.weight_decay,
          "a finite number >= 0");
  require(finite(o.clip_grad_norm) && o.clip_grad_norm >= 0, "clip_grad_norm", o.clip_grad_norm,
          "a finite number >= 0 (0: off)");
  if (o.accumulate < 1) {
    throw Error("add_training_step: Optimizer::accumulate is " + std::to_string(o.accumulate) +
                ", expected >= 1");
  }
}

struct StepScalars {
  Tensor lr, step, apply;
  Tensor bias_correction1, bias_correction2;  // Adam, AdamW
};

// Keeps `old` unless this micro-batch applies the update.
Tensor gated(const Optimizer& opt, const StepScalars& s, Tensor updated, Tensor old) {
  return opt.accumulate > 1 ? where(s.apply, updated, old) : updated;
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
        g.assign(buf, gated(opt, s, buf_new, buf));
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
      g.assign(m, gated(opt, s, m_new, m));
      g.assign(v, gated(opt, s, v_new, v));
      // lr / bc1 and sqrt(bc2) are scalars: computed once, not per element.
      Tensor step_size = s.lr / s.bias_correction1;
      next = pf - step_size * m_new / (sqrt(v_new) / sqrt(s.bias_correction2) + opt.eps);
      break;
    }
  }
  if (dt != DType::f32) next = cast(next, dt);
  g.assign(p, gated(opt, s, next, p));
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
  if (loss.numel() != 1) {
    throw ShapeError("add_training_step: the loss must have one element, got " + loss.type().str());
  }
  check_hyperparameters(opt);
  if (parameters.empty()) {
    for (NodeId id : g.parameters()) parameters.push_back(g.tensor(id));
  }
  if (parameters.empty()) throw Error("add_training_step: the graph has no parameters");
  TrainingStep out;
  out.loss = loss;
  out.parameters = parameters;
  out.gradients = gradients(loss, parameters);

  StepScalars s{g.input(StepInputs::lr, {}), g.input(StepInputs::step, {}), {}};
  if (opt.accumulate > 1) s.apply = g.input(StepInputs::apply, {});
  if (opt.kind != Optimizer::Kind::sgd) {
    s.bias_correction1 = g.input(StepInputs::bias_correction1, {});
    s.bias_correction2 = g.input(StepInputs::bias_correction2, {});
  }

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
  if (opt.clip_grad_norm > 0) {
    Tensor sq;
    for (const Tensor& gr : grads) {
      Tensor term = sum(cast(gr, DType::f32) * cast(gr, DType::f32));
      sq = sq.valid() ? sq + term : term;
    }
    out.grad_norm = sqrt(sq);
    Tensor coef = minimum(opt.clip_grad_norm / (out.grad_norm + 1e-6), g.scalar(1.0));
    for (Tensor& gr : grads) gr = gr * (gr.dtype() == DType::f32 ? coef : cast(coef, gr.dtype()));
  }
  for (size_t i = 0; i < parameters.size(); ++i)
    update_parameter(g, opt, s, parameters[i], grads[i]);
  if (!g.find_output("loss")) g.output("loss", loss);
  if (output_gradients) {
    for (size_t i = 0; i < parameters.size(); ++i) {
      g.output("grad/" + g.node(parameters[i].id()).name, out.gradients[i]);
    }
  }
  return out;
}

}  // namespace mn
