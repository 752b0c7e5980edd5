#pragma once
// Recomputation of cheap forward values in a training step's backward pass.
//
// A forward value that the backward pass reads (an activation saved for a gradient) stays in the
// arena from the forward pass until its last backward reader. When it is a pointwise function
// of values the backward pass keeps anyway (parameters, or activations that backward reads
// themselves), it can be computed again where the backward pass needs it: the backward readers
// get a copy of the node (and of such nodes below it), and the original dies with its last
// forward reader. The copies fuse into the backward's pointwise kernels, or run as one
// pointwise kernel before a product that reads them; nothing changes numerically (the same
// operations on the same values). In SmolLM2's decoder layers: the RMSNorm outputs that the
// weight gradients read, silu(gate) and silu(gate)·up, about 2.5 GB at 8 × 512 tokens. Values
// the backward pass does not read are recomputed as links of such a chain, and small inputs
// (per-channel statistics) are kept for it: a ReLU after a batch norm's affine is computed
// again from the convolution's output where the next layer's weight gradient reads it.
#include <optional>
#include <vector>

#include <meganeura/graph.h>

namespace mn::schedule {

struct RematerializeOptions {
  // Values of fewer elements (2 MiB in f32) stay stored: a copy that cannot fuse into its
  // reader costs a launch, worth it only for memory that counts.
  int64_t min_elements = 1 << 19;
  // A forward input this many times smaller than the value (per-channel statistics) is kept
  // for the copy when the backward pass does not keep it anyway.
  int64_t small_ratio = 16;
};

struct Rematerialized {
  Graph graph;
  std::vector<char> copies;  // per node of `graph`: a copy (FusionOptions::deferred)
};

// `lowered` (after lower_for_gpu) with the backward readers of recomputable forward values
// reading copies of them; nullopt when no value is recomputed (no backward pass, or nothing large
// and cheap enough), so that the graph is not rebuilt for nothing.
std::optional<Rematerialized> rematerialize(const Graph& lowered,
                                            const RematerializeOptions& options = {});

}  // namespace mn::schedule
