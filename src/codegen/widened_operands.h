#pragma once
// Which kernels can read a 16-bit float operand where their node reads it widened to f32.
//
// Parameters stored in f16 or bf16 enter the graph through cast(w, f32). Widening is exact, and
// most kernels load every operand through a dtype-generic loader that converts to float as it
// reads (codegen/glsl.h), so such a kernel can bind the 16-bit tensor itself: the cast's kernel
// and its f32 copy disappear (for a decoding step of a bf16 model: a kernel and a full-size
// f32 copy per weight matrix, every token). The scheduler asks here before substituting
// (schedule/widened_loads.h).
#include <vector>

#include "codegen/kernel.h"

namespace mn::codegen {

// `ctx` is the node with its operand types as the graph has them (input `input` f32); the
// answer is whether its lowering computes the same values with that operand of type `narrow`
// (f16 or bf16) instead, taking the same kind of kernel (a matmul keeps its tensor-core path
// only where that path loads the narrow type itself).
bool reads_widened_operand(const LowerContext& ctx, int input, DType narrow);

}  // namespace mn::codegen
