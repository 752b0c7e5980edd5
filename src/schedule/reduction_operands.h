#pragma once
// Reductions that compute their operand in their own loads, from the stored values it comes from.
//
// A reduction takes the pointwise DAG computing its operand as a prologue (schedule/fusion.h)
// only when nothing else reads that DAG's values. A batch-norm backward reads one gradient
// value g in three sums (Σg, Σg·x̂, Σg·γ·x̂) and in the input gradient: fusion then stores g,
// g·γ, g·γ·x̂ and g·x̂ as outputs of one pointwise kernel, four full-size tensors live together
// (ResNet-18's stem: 392 MiB of its 735 at batch 32). Here each such reduction gets a private
// copy of the DAG, from the stored values the DAG starts at; the copies fuse into the
// reductions' loads and the originals into the pointwise kernel that still reads them, so none
// of the intermediate values is stored. The reductions read their DAG's inputs instead of one
// stored value; the values are computed by the same operations on the same inputs.
#include <cstdint>
#include <optional>

#include <meganeura/graph.h>

namespace mn::schedule {

struct ReductionOperandOptions {
  // Operands of fewer elements stay shared: their memory does not count.
  int64_t min_elements = 1 << 16;
  size_t max_nodes = 16;        // pointwise nodes copied for one reduction
  uint32_t max_bindings = 32;   // the reduction's kernel binds the DAG's inputs and its output
};

// `lowered` (after lower_for_gpu) with private operand DAGs for the reductions whose operand
// DAG other kernels also read; nullopt when there is none.
std::optional<Graph> private_reduction_operands(const Graph& lowered,
                                                const ReductionOperandOptions& options = {});

}  // namespace mn::schedule
