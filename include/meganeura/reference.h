#pragma once
// The CPU reference interpreter: the oracle for every test. Computes in double (reductions and
// matmul accumulate in double too), whatever the dtypes say.
#include <map>
#include <span>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

namespace mn::reference {

using Feeds = std::map<std::string, Array, std::less<>>;

// Values of the given nodes. Every input reached must be fed (by name); a parameter takes its
// fed value, else its initializer's (states likewise). Fed values are checked against the declared
// shape/dtype.
std::vector<Array> evaluate_nodes(const Graph& g, const Feeds& feeds,
                                  std::span<const NodeId> nodes);

// Values of all named outputs.
std::map<std::string, Array> evaluate(const Graph& g, const Feeds& feeds);

// Initial values of every parameter and state, by name.
Feeds initial_parameters(const Graph& g);

// One step of a graph with assignments (a training step): evaluates the outputs, then stores
// every assigned value into `persistent` (parameters and states by name; missing ones start from
// their initializers). Values stored are rounded to their dtype, as a device would store them.
std::map<std::string, Array> run_step(const Graph& g, const Feeds& inputs, Feeds& persistent);

}  // namespace mn::reference
