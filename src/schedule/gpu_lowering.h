#pragma once
// Rewrites a graph into ops the GPU backend has kernels for: composites without a kernel of
// their own are replaced by their decompositions (from the op table) until every op lowers.
#include <meganeura/graph.h>

namespace mn::schedule {

// A new graph computing the same outputs and assignments (same input, parameter, state and
// output names), containing only ops with a GPU lowering. mn::Error names an op that has
// neither a lowering nor a decomposition.
Graph lower_for_gpu(const Graph& g);

}  // namespace mn::schedule
