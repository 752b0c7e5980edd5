#pragma once
// Rewrites of a kernel's stores through its output's generic store (`out_st`, glsl::buffer),
// so that any lowering storing only through it takes them.
//
// Twin: a kernel that stores its result twice: in its own dtype and, through a second output
// binding, cast to another float dtype. With mixed precision a value is often read both in f32 (a
// softmax's backward, attention) and in 16 bits (a product's operand); its kernel then writes
// the 16-bit copy as it stores the f32 one, and the cast's launch, its barrier and its second
// read of the value disappear (schedule/narrowed_stores.h decides where).
#include <string>

#include "codegen/kernel.h"

namespace mn::codegen {

// Whether every lowering of the node stores its result through the generic store of its output
// binding (`out_st`, glsl::buffer) and nothing else, so that add_twin_store and
// add_permuted_store can apply to it: rotations, normalizations, softmax, attention's forward
// kernels, the converting copies.
bool stores_only_through_out_st(const Node& node);

// Rewrites every launch of `l` that writes output `of` so that each store of it also stores
// cast(value, twin) into a new binding, ArgRef::output(twin_output). `own` is the output's
// dtype. The twin holds what a cast kernel of the output would: a narrowing rounds the stored
// f32 value as the cast does; a widening is exact only where the value is a widened 16-bit
// one (a converting copy's), which the caller guarantees. Throws when a launch writes its
// output other than through `out_st` (a lowering stores_only_through_out_st should not have named).
// The output a rewrite applies to: ArgRef::output(index), stored through `<name>_st`.
struct KernelOutput {
  int index = 0;
  std::string name = "out";
};
void add_twin_store(Lowering& l, DType own, DType twin, int twin_output = 1,
                    const KernelOutput& of = {});

// Permuted: a kernel whose result only a permute reads stores it in the permute's layout, so
// the permute needs no launch: element i of the result (row-major in `shape`) goes where
// permute(result, perm) holds it. `of` names the output's store helper (a product's kernels
// store through C_st). Throws as add_twin_store does.
void add_permuted_store(Lowering& l, const Shape& shape, const std::vector<int64_t>& perm,
                        const KernelOutput& of = {});

// Permuted twin: a kernel whose result a permute reads beside other readers stores it as it is
// and, through a second binding ArgRef::output(twin_output), in the permute's layout cast to
// `twin` (rounded as the permute's narrowing copy would): element i of the result (row-major in
// `shape`) goes where permute(result, perm) holds it. Throws as add_permuted_store does.
void add_permuted_twin_store(Lowering& l, DType twin, const Shape& shape,
                             const std::vector<int64_t>& perm, int twin_output);

// GLSL `uint <name>(uint i)`: where element i of a row-major tensor of `shape` lies in
// permute(tensor, perm).
std::string permuted_offset_function(const Shape& shape, const std::vector<int64_t>& perm,
                                     const std::string& name);
// Per axis of a row-major tensor of `shape`, its stride in permute(tensor, perm).
std::vector<int64_t> permuted_axis_strides(const Shape& shape, const std::vector<int64_t>& perm);
// "permute(0,2,1,3)": how kernel names show a permutation they store through.
std::string permute_label(const std::vector<int64_t>& perm);

}  // namespace mn::codegen
