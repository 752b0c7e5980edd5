// Optimizers with PyTorch's names and defaults, learning-rate schedules, the training step
// appended to a graph, and the stepper that keeps the update count.
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "bindings.h"

namespace mn::python {

namespace {

LrSchedule schedule_of(const py::object& value) {
  if (value.is_none()) return {};
  if (py::isinstance<LrSchedule>(value)) return value.cast<LrSchedule>();
  if (py::isinstance<py::str>(value)) {
    LrSchedule s;
    s.kind = schedule_from_name(value.cast<std::string>());
    return s;
  }
  throw Error("optimizer schedule: expected an LrSchedule, 'constant', 'step' or 'cosine', got " +
              py::repr(value).cast<std::string>());
}

// Adam or AdamW (their options have the same fields), checked.
template <class Options, Optimizer (*make)(const Options&)>
Optimizer adam_family(double lr, double beta1, double beta2, double eps, double weight_decay,
                      double clip, int accumulate, const py::object& schedule) {
  Optimizer o = make({.lr = lr,
                      .beta1 = beta1,
                      .beta2 = beta2,
                      .eps = eps,
                      .weight_decay = weight_decay,
                      .clip_grad_norm = clip,
                      .accumulate = accumulate,
                      .schedule = schedule_of(schedule)});
  o.validate(std::string("optim.") + optimizer_name(o.kind));
  return o;
}

void bind_schedule(py::module_& optim) {
  py::class_<LrSchedule>(optim, "LrSchedule",
                         "Learning rate per update: linear warm-up, then constant, step decay "
                         "or cosine down to min_lr.")
      .def(py::init([](const std::string& kind, int64_t warmup, int64_t step_size, double gamma,
                       double min_lr) {
             LrSchedule s;
             s.kind = schedule_from_name(kind);
             s.warmup = warmup;
             s.step_size = step_size;
             s.gamma = gamma;
             s.min_lr = min_lr;
             return s;
           }),
           py::arg("kind") = "constant", py::kw_only(), py::arg("warmup") = 0,
           py::arg("step_size") = 1000, py::arg("gamma") = 0.1, py::arg("min_lr") = 0.0)
      .def_readwrite("warmup", &LrSchedule::warmup)
      .def_readwrite("step_size", &LrSchedule::step_size)
      .def_readwrite("gamma", &LrSchedule::gamma)
      .def_readwrite("min_lr", &LrSchedule::min_lr)
      .def("lr_at", &LrSchedule::lr_at, py::arg("base_lr"), py::arg("update"), py::arg("total"));
}

void bind_optimizer(py::module_& optim) {
  py::class_<Optimizer> opt(optim, "Optimizer",
                            "An optimizer's kind and hyperparameters (made by SGD, Adam, AdamW).");
  opt.def_property_readonly("kind", [](const Optimizer& o) { return optimizer_name(o.kind); })
      .def_readwrite("lr", &Optimizer::lr)
      .def_readwrite("schedule", &Optimizer::schedule)
      .def_readwrite("momentum", &Optimizer::momentum)
      .def_readwrite("dampening", &Optimizer::dampening)
      .def_readwrite("nesterov", &Optimizer::nesterov)
      .def_readwrite("beta1", &Optimizer::beta1)
      .def_readwrite("beta2", &Optimizer::beta2)
      .def_readwrite("eps", &Optimizer::eps)
      .def_readwrite("weight_decay", &Optimizer::weight_decay)
      .def_readwrite("clip_grad_norm", &Optimizer::clip_grad_norm)
      .def_readwrite("accumulate", &Optimizer::accumulate)
      .def("lr_at", &Optimizer::lr_at, py::arg("update"), py::arg("total"))
      .def(
          "validate", [](const Optimizer& o) { o.validate("Optimizer"); },
          "Raises mn.Error naming the first hyperparameter out of its range.")
      .def("__repr__", [](const Optimizer& o) {
        return std::string("<meganeura.optim.Optimizer ") + optimizer_name(o.kind) +
               " lr=" + std::to_string(o.lr) + ">";
      });

  optim.def(
      "SGD",
      [](double lr, double momentum, double dampening, double weight_decay, bool nesterov,
         double clip_grad_norm, int accumulate, const py::object& schedule) {
        auto o = Optimizer::sgd({.lr = lr,
                                 .momentum = momentum,
                                 .dampening = dampening,
                                 .weight_decay = weight_decay,
                                 .nesterov = nesterov,
                                 .clip_grad_norm = clip_grad_norm,
                                 .accumulate = accumulate,
                                 .schedule = schedule_of(schedule)});
        o.validate("optim.SGD");
        return o;
      },
      py::arg("lr") = 1e-3, py::kw_only(), py::arg("momentum") = 0.0,
      py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false,
      py::arg("clip_grad_norm") = 0.0, py::arg("accumulate") = 1,
      py::arg("schedule") = py::none(), "torch.optim.SGD's semantics and defaults.");
  using AdamFactory = Optimizer (*)(double, double, double, double, double, double, int,
                                    const py::object&);
  const AdamFactory adam = &adam_family<AdamOptions, &Optimizer::adam>;
  const AdamFactory adamw = &adam_family<AdamWOptions, &Optimizer::adamw>;
  for (const auto& [name, factory, decay, doc] :
       {std::tuple{"Adam", adam, 0.0, "torch.optim.Adam's semantics and defaults."},
        std::tuple{"AdamW", adamw, 0.01, "torch.optim.AdamW's semantics and defaults."}}) {
    optim.def(name, factory, py::arg("lr") = 1e-3, py::kw_only(), py::arg("beta1") = 0.9,
              py::arg("beta2") = 0.999, py::arg("eps") = 1e-8, py::arg("weight_decay") = decay,
              py::arg("clip_grad_norm") = 0.0, py::arg("accumulate") = 1,
              py::arg("schedule") = py::none(), doc);
  }
}

void bind_stepper(py::module_& optim) {
  py::class_<OptimizerStepper>(optim, "Stepper",
                               "Keeps a training session's update count and sets its learning "
                               "rate, step and bias corrections before every step.")
      .def(py::init<Optimizer, int64_t>(), py::arg("optimizer"), py::arg("total_updates") = 0)
      .def("set_inputs", &OptimizerStepper::set_inputs, py::arg("session"))
      .def(
          "step",
          [](OptimizerStepper& s, Session& session) {
            py::gil_scoped_release release;
            s.step(session);
          },
          py::arg("session"), "set_inputs, one session step, and counts it.")
      .def("advance", &OptimizerStepper::advance)
      .def("seek", &OptimizerStepper::seek, py::arg("micro_batches"))
      .def_property_readonly("micro_batches", &OptimizerStepper::micro_batches)
      .def_property_readonly("updates", &OptimizerStepper::updates)
      .def_property_readonly("lr", &OptimizerStepper::lr)
      .def_property_readonly("optimizer", &OptimizerStepper::optimizer);
}

}  // namespace

void bind_optim(py::module_& m, py::module_& optim) {
  bind_schedule(optim);
  bind_optimizer(optim);
  bind_stepper(optim);
  py::class_<TrainingStep>(m, "TrainingStep")
      .def_readonly("loss", &TrainingStep::loss)
      .def_readonly("parameters", &TrainingStep::parameters)
      .def_readonly("gradients", &TrainingStep::gradients)
      .def_readonly("grad_norm", &TrainingStep::grad_norm);
  m.def(
      "add_training_step",
      [](const py::object& loss, const Optimizer& opt, const std::vector<Tensor>& parameters,
         bool output_gradients) {
        auto step = add_training_step(loss.cast<Tensor>(), opt, parameters, output_gradients);
        py::object out = py::cast(step);
        py::detail::keep_alive_impl(out, loss);
        return out;
      },
      py::arg("loss"), py::arg("optimizer"), py::arg("parameters") = std::vector<Tensor>{},
      py::arg("output_gradients") = false,
      "Appends backward and the optimizer's update of every parameter (or of `parameters`) "
      "to loss's graph and outputs 'loss'; with output_gradients each gradient is an output "
      "'grad/<parameter>'.");
}

}  // namespace mn::python
