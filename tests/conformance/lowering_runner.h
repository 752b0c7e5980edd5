#pragma once
// Runs one node's GPU lowering directly on the test device, under device traits the test
// chooses (a small group-count limit forces the grid folding that only huge tensors reach on a
// real device; storage_16bit = false the missing-feature error), and returns its output.
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

#include "codegen/kernel.h"

namespace mn::testing {

// The traits of the test device, as the session derives them.
codegen::DeviceTraits device_traits();

// The lowering of node `id` of `g`, whose inputs take `inputs` (one per node input, in order).
codegen::Lowering lower_node(const Graph& g, NodeId id, const codegen::DeviceTraits& traits);

// Lowers node `id` with `traits`, runs its launches and reads back its output.
Array run_lowering(const Graph& g, NodeId id, const std::vector<Array>& inputs,
                   const codegen::DeviceTraits& traits);

}  // namespace mn::testing
