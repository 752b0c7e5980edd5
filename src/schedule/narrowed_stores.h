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
// `device` (maybe nullptr) tells which readers load a 16-bit value widened themselves
// (read_widened_by_all): a copy's widening is stored only for readers that cannot.
void narrow_stores(const Graph& g, std::vector<KernelGroup>& groups,
                   const codegen::DeviceTraits* device = nullptr);

// A kernel whose result a cast reads beside other readers stores the cast's value too, through a
// second output (codegen/store_rewrites.h): a softmax's probabilities in f32 for its backward and
// in bf16 for the product with the values, a rotation's f32 query for attention and its bf16
// copy for the gradient products, attention's output for its backward and for the output
// projection, a 16-bit permute's widening for attention. As for a narrowed store, the value is
// rounded as the cast rounds it, or widened exactly from a copy. Runs after the other passes
// over single groups (which take one output) but for the stacking of rotations, whose two values
// may each take one: the group's nodes gain the cast, its outputs the cast's value, and the
// cast's group is dropped.
void twin_stores(const Graph& g, std::vector<KernelGroup>& groups,
                 const codegen::DeviceTraits* device = nullptr);

// A single group's twins: (output i, output j) where output j is a cast of output i.
std::vector<std::pair<int, int>> twin_outputs(const Graph& g, const KernelGroup& group);

// The dtype a single group's kernel stores: its output's (the cast's, for a narrowed store).
// The node it lowers is the group's first; lower_group passes it with this type.
Node stored_node(const Graph& g, const KernelGroup& group);

}  // namespace mn::schedule
