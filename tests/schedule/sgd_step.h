#pragma once
// One SGD step (learning rate 0.1) of a training graph on the reference, for the schedule tests
// that compare a rewritten step graph with the one it came from.
#include <map>
#include <string>

#include <meganeura/array.h>
#include <meganeura/graph.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>

namespace mn::testing {

struct StepResult {
  std::map<std::string, Array> outputs;
  reference::Feeds persistent;  // parameters and states after the step
};

// `g`'s step with input "x" = `x` and the optimizer's step scalars.
inline StepResult sgd_step(const Graph& g, const Array& x) {
  reference::Feeds inputs{{"x", x}};
  for (const auto& [name, value] : step_scalars(Optimizer::sgd({.lr = 0.1}), 0.1, 1)) {
    inputs[name] = Array::scalar(value);
  }
  StepResult r;
  r.outputs = reference::run_step(g, inputs, r.persistent);
  return r;
}

}  // namespace mn::testing
