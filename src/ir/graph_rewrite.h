#pragma once
// Building a new graph from an old one node by node (Graph is not copyable: tensors point at
// their graph). Used by the optimizer (an unchanged graph, the e-graph's extraction) and by
// the GPU lowering (decomposing composites).
#include <functional>
#include <span>

#include <meganeura/graph.h>

namespace mn {

// In `out`, a copy of a leaf node of another graph: input, parameter or state (same name,
// shape, dtype and initializer) or constant. An invalid Tensor for any other op.
Tensor copy_leaf(Graph& out, const Node& n);

// Copies `g` node by node; `rewrite` may return a replacement built in `out` from the mapped
// operands, or an invalid Tensor to copy the node as it is. Outputs and assignments follow.
// mn::Error when a replacement's type differs from the node's.
using NodeRewrite =
    std::function<Tensor(Graph& out, const Node& node, std::span<const Tensor> operands)>;
Graph rewrite_graph(const Graph& g, const NodeRewrite& rewrite);

// The graph as it is: same nodes, names, outputs and assignments.
Graph copy_graph(const Graph& g);

}  // namespace mn
