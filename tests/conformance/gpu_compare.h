#pragma once
// Running a graph on the GPU and comparing with the CPU reference, for the GPU tests of the
// elementwise, reduction and matmul lowerings beyond the op table's samples.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include <meganeura/graph.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn::testing {

inline std::map<std::string, Array> run_gpu(const Graph& g, const reference::Feeds& feeds,
                                            const SessionOptions& options = {}) {
  auto session = build_session(g, options);
  for (const auto& [name, value] : feeds) session->set(name, value);
  session->step();
  std::map<std::string, Array> out;
  for (const std::string& name : session->output_names()) out[name] = session->get(name);
  return out;
}

// The reference's values as the output's dtype stores them.
inline Array stored(Array a) {
  for (double& v : a.data) v = round_to_dtype(v, a.dtype);
  return a;
}

// Bit-for-bit agreement (NaN matches NaN), reporting the first few mismatches.
inline void expect_same_values(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  int reported = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    const bool same =
        (std::isnan(g) && std::isnan(w)) || (g == w && std::signbit(g) == std::signbit(w));
    if (!same && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w;
    }
  }
}

inline void expect_exact(const Graph& g, const reference::Feeds& feeds) {
  auto want = reference::evaluate(g, feeds);
  auto got = run_gpu(g, feeds);
  for (const auto& [name, expected] : want)
    expect_same_values(got.at(name), stored(expected), name);
}

inline void expect_close(const Graph& g, const reference::Feeds& feeds, double tol = 2e-5) {
  auto want = reference::evaluate(g, feeds);
  auto got = run_gpu(g, feeds);
  for (const auto& [name, expected] : want) {
    ASSERT_EQ(got.at(name).shape, expected.shape) << name;
    EXPECT_TRUE(elementwise_near(got.at(name), stored(expected), tol)) << name;
  }
}

}  // namespace mn::testing
