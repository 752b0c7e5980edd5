#pragma once
// The step counter that dropout masks draw from: one i32 state per graph, "nn/dropout_step"
// (no module key contains '/'), increased by one after every step of the graph, so each step of
// a recorded training graph drops other elements. It is a graph state, not a module buffer: it
// is saved with training checkpoints (a resumed run draws the same masks) but not in state_dict.
#include <meganeura/graph.h>

#include "ir/ops/nn.h"

namespace mn::nn {

inline constexpr const char* kDropoutStep = "nn/dropout_step";

inline Tensor dropout_step(Graph& g) {
  if (auto id = g.find_state(kDropoutStep)) return g.tensor(*id);
  Tensor step = g.state(kDropoutStep, {}, Init::zeros(), DType::i32);
  g.assign(step, step + 1.0);
  return step;
}

// Inverted dropout of x with the module's seed and the graph's step counter.
inline Tensor stepped_dropout(Tensor x, double p, uint64_t seed) {
  if (p == 0.0) return x;
  return x.graph().apply("dropout", DropoutAttrs{p, seed}, {x, dropout_step(x.graph())});
}

}  // namespace mn::nn
