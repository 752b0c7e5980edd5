#pragma once
// Shared helpers of the optimizer tests: random feeds for a graph and a comparison of two graphs
// with the same interface on the CPU reference (outputs and assigned values after one step).
#include <string>

#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "support/random_fill.h"

namespace mn::testing {

// Random values for every input of `g`; integer inputs draw from [0, int_high).
inline reference::Feeds random_feeds(const Graph& g, std::mt19937_64& rng, int64_t int_high = 2) {
  reference::Feeds feeds;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    if (is_float(n.type.dtype)) {
      feeds[n.name] = random_array(rng, n.type);
    } else {
      feeds[n.name] = random_array(rng, n.type, 0, static_cast<double>(int_high));
    }
  }
  return feeds;
}

// Largest relative error between the two graphs' outputs and assigned parameter/state values
// after one step from the initial values; a missing or differently shaped result counts as 1e30.
inline double step_difference(const Graph& a, const Graph& b, const reference::Feeds& feeds) {
  reference::Feeds pa = reference::initial_parameters(a);
  reference::Feeds pb = reference::initial_parameters(b);
  auto oa = reference::run_step(a, feeds, pa);
  auto ob = reference::run_step(b, feeds, pb);
  double worst = 0;
  auto compare = [&](const auto& x, const auto& y) {
    if (x.size() != y.size()) return 1e30;
    double w = 0;
    for (const auto& [name, arr] : x) {
      auto it = y.find(name);
      if (it == y.end() || it->second.shape != arr.shape || it->second.dtype != arr.dtype)
        return 1e30;
      w = std::max(w, relative_error(it->second, arr));
    }
    return w;
  };
  worst = std::max(worst, compare(oa, ob));
  worst = std::max(worst, compare(pa, pb));
  return worst;
}

}  // namespace mn::testing
