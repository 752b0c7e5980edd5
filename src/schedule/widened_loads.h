#pragma once
// Kernels that read a 16-bit tensor where their node reads cast(tensor, f32) bind the tensor
// itself when their lowering converts as it loads (codegen/widened_operands.h); a cast whose
// every reader did so, and whose value nothing else needs, loses its kernel. A converting copy
// (permute, transpose) takes a cast either way: it loads the cast's operand and rounds as it
// stores, so permute(cast(x, bf16)) is one kernel.
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// The f16/bf16 source of an exact widening cast(x, f32) node, or -1.
NodeId widened_source(const Graph& g, NodeId id);

// Rewrites the inputs of single and matmul-epilogue groups in place and drops the groups of
// casts left unread; the order of the remaining groups is kept.
void absorb_widening_casts(const Graph& g, std::vector<KernelGroup>& groups,
                           const codegen::DeviceTraits& device);

}  // namespace mn::schedule
