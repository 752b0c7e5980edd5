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
// fed value, else its initializer's. Fed values are checked against the declared shape/dtype.
std::vector<Array> evaluate_nodes(const Graph& g, const Feeds& feeds, std::span<const NodeId> nodes);

// Values of all named outputs.
std::map<std::string, Array> evaluate(const Graph& g, const Feeds& feeds);

// Initial values of every parameter, by name.
Feeds initial_parameters(const Graph& g);

}  // namespace mn::reference
