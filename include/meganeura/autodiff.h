#pragma once
// Reverse-mode differentiation into graph ops.
#include <vector>

#include <meganeura/graph.h>

namespace mn {

// Appends to loss's graph the ops computing d(loss)/d(wrt[i]) for each i. `loss` must be a
// scalar unless `cotangent` (same shape as loss) is given. Uses of a tensor are summed,
// stop_gradient and non-differentiable ops block the flow, and a `wrt` that loss does not depend
// on gets zeros.
std::vector<Tensor> gradients(Tensor loss, const std::vector<Tensor>& wrt, Tensor cotangent = {});

}  // namespace mn
