#pragma once
// The optimizer's cost model: per node, bytes read + written (from the types), FLOPs, and kernel
// dispatches, turned into seconds with the device parameters (CostParams):
//
//   seconds = bytes / bytes_per_second + flops / flops_per_second
//             + dispatches · seconds_per_dispatch
//
// Pointwise ops (and the copying views: permute, broadcast_to, slice...) cost their bytes and
// FLOPs but no dispatch, because the scheduler fuses pointwise chains into one kernel; ops with a
// kernel of their own (reductions, matmul, convolution, attention, the norm/softmax composites)
// cost one dispatch. A composite without a GPU kernel is lowered to its decomposition anyway, so
// it is priced as several kernels (composite_penalty) and extraction prefers the explicit
// decomposition whenever the e-graph holds it. Reshape-like views and sources are (almost) free;
// every cost stays positive because extraction needs that.
#include <span>
#include <vector>

#include <meganeura/graph.h>

#include "egraph/extract.h"
#include "optimize/optimize.h"
#include "optimize/tensor_egraph.h"

namespace mn::optimize {

struct NodeEstimate {
  double bytes = 0;
  double flops = 0;
  double dispatches = 0;
};

struct GraphEstimate {
  size_t nodes = 0;  // compute nodes (sources excluded)
  double bytes = 0;
  double flops = 0;
  double seconds = 0;
};

class CostModel {
 public:
  explicit CostModel(const CostParams& params = {});

  NodeEstimate estimate(const OpDef& op, const Attrs& attrs, std::span<const TensorType> inputs,
                        const TensorType& output) const;
  double seconds(const OpDef& op, const NodeEstimate& e) const;
  // Totals over the nodes of `g` that the roots (outputs and assigned values) reach.
  GraphEstimate estimate(const Graph& g) const;
  // Per-node cost in seconds for extraction over `teg` (its current nodes are priced once, here).
  egraph::NodeCost node_cost(const TensorEGraph& teg) const;

  const CostParams& params() const { return params_; }

 private:
  CostParams params_;
};

}  // namespace mn::optimize
