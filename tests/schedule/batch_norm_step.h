#pragma once
// A training step whose batch norm's backward pass reads one gradient in several sums, for the
// schedule tests.
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/optimizer.h>

namespace mn::testing {

// conv → batch norm (training) → relu → mean square, by SGD: the batch norm's backward reads
// one gradient in three sums and in the input gradient.
struct BatchNormStep {
  static constexpr int64_t kN = 4, kC = 8, kHW = 48;  // 73728 elements per activation
  Graph g;
  BatchNormStep() {
    Tensor x = g.input("x", {kN, kC, kHW, kHW});
    Tensor w = g.parameter("w", {kC, kC, 3, 3}, Init::normal(0.0, 0.3, 1));
    Tensor gamma = g.parameter("gamma", {kC}, Init::normal(1.0, 0.1, 2));
    Tensor beta = g.parameter("beta", {kC}, Init::normal(0.0, 0.1, 3));
    Tensor rm = g.state("running_mean", {kC}, Init::zeros());
    Tensor rv = g.state("running_var", {kC}, Init::ones());
    Conv2dOptions o;
    o.padding = {1, 1};
    BatchNormResult bn = batch_norm(conv2d(x, w, {}, o), gamma, beta, rm, rv, true);
    g.assign(rm, bn.running_mean);
    g.assign(rv, bn.running_var);
    Tensor y = relu(bn.y);
    Tensor loss = mean(y * y);
    g.output("loss", loss);
    add_training_step(loss, Optimizer::sgd({.lr = 0.1}));
  }
};

}  // namespace mn::testing
