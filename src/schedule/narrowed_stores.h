#pragma once
// A kernel whose result only a narrowing cast reads stores the cast's value itself: with mixed
// precision, rotary embeddings, permutes and RMSNorm computed in f32 for a 16-bit product's
// operand (rope_positions_backward's gradient, a prompt's normalized hidden state, then cast to
// bf16) write the 16-bit tensor directly, and the cast's launch and the f32 copy disappear.
// Only lowerings that store through the generic store take it (codegen::stores_narrowed_result):
// the value is rounded as the cast rounds it. A converting copy of a 16-bit tensor also stores
// its widening cast (a prompt's values permuted in bf16, then widened for the f32 cache).
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::schedule {

// Gives every such single group the cast (its nodes become {node, cast}, its output the cast)
// and drops the cast's group; the order of the remaining groups is kept.
void narrow_stores(const Graph& g, std::vector<KernelGroup>& groups);

// The dtype a single group's kernel stores: its output's (the cast's, for a narrowed store).
// The node it lowers is the group's first; lower_group passes it with this type.
Node stored_node(const Graph& g, const KernelGroup& group);

}  // namespace mn::schedule
