#pragma once
// Pieces shared by the shape-family lowerings: lower_shape.cpp (views, slicing, concatenation,
// padding) and lower_shape_index.cpp (take, scatter_add, one_hot).
#include <string>
#include <vector>

#include <meganeura/dtype.h>

#include "codegen/kernel.h"

namespace mn::codegen::shape_lowering {

// A statement storing element `index` of buffer `src` into out[dst], moving the value exactly:
// integer tensors go through ints (a float round trip would round past 2^24), float tensors
// through f32 (exact for f16/bf16 storage).
std::string copy_to_out(DType t, const std::string& src, const std::string& index,
                        const std::string& dst = "i");

// Stores the constant `value` (already rounded to `t`) into out[i].
std::string store_constant(DType t, double value);

// A kernel with one thread per output element i < n. Binding b reads node input inputs[b]
// through helpers named in<b>; the next binding is the output, helpers named out; with
// `index_slot` (and ctx.check_indices) the node's index slot follows, so the body may call
// mn_bad_index (codegen/index_check.h).
// `declarations` (functions the body calls) come after the buffers.
KernelLaunch per_element(const LowerContext& ctx, std::string name, const std::vector<int>& inputs,
                         const std::string& body, uint64_t n, bool index_slot = false,
                         const std::string& declarations = "");

void register_shape_index_lowerings(LoweringRegistry& r);  // lower_shape_index.cpp

}  // namespace mn::codegen::shape_lowering
