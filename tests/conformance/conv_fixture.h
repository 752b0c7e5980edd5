#pragma once
// A convolution test graph: random inputs, the output `y` with the gradients of sum(y · r) for
// a random r, run on the GPU and compared with the CPU reference, output by output.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn::testing {

struct ConvFixture {
  Graph g;
  reference::Feeds feeds;
  std::vector<Tensor> wrt;
  std::mt19937_64 rng;

  explicit ConvFixture(const std::string& seed) : rng(rng_for(seed)) {}

  // An input with values in [-1, 1) as its dtype holds them; gradients are taken w.r.t. it.
  Tensor input(const std::string& name, const Shape& shape, DType dtype = DType::f32) {
    Tensor t = g.input(name, shape, dtype);
    Array a = random_array(rng, {shape, dtype}, -1.0, 1.0);
    for (double& v : a.data) v = round_to_dtype(v, dtype);
    feeds[name] = std::move(a);
    wrt.push_back(t);
    return t;
  }

  // Outputs `y` and, with `grads`, the gradients of sum(y · r) for a random r.
  void finish(Tensor y, bool grads = true) {
    g.output("y", y);
    if (!grads) return;
    Array r = random_array(rng, y.type(), -1.0, 1.0);
    auto gs = gradients(sum(y * g.constant(r)), wrt);
    for (size_t i = 0; i < gs.size(); ++i) g.output("grad" + std::to_string(i), gs[i]);
  }

  // Runs one step, compares every output with the reference (as the output's dtype stores
  // it) within `tol`, and returns the names of the kernels that ran.
  std::vector<std::string> run_and_compare(double tol = 2e-5) {
    SessionOptions so;
    so.profile = true;
    auto session = build_session(g, so);
    for (const auto& [name, value] : feeds) session->set(name, value);
    session->step();
    for (const auto& [name, expected] : reference::evaluate(g, feeds)) {
      SCOPED_TRACE(name);
      Array got = session->get(name);
      EXPECT_EQ(got.shape, expected.shape);
      if (got.shape != expected.shape) continue;
      Array rounded = expected;
      for (double& v : rounded.data) v = round_to_dtype(v, expected.dtype);
      EXPECT_TRUE(elementwise_near(got, rounded, tol));
    }
    std::vector<std::string> names;
    for (const auto& k : session->profile()) names.push_back(k.name);
    return names;
  }
};

}  // namespace mn::testing
