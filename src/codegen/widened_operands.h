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

// Whether a bf16 training step's attention reads its q, k, v and dout rounded to bf16
// (optimize::MixedPrecisionOptions::attention_operands) on this device: where its forward and
// gradient ops take the tensor-addressed kernels, whose bf16 matrices load bf16 tensors as they
// are (reads_widened_operand then binds them) and round f32 ones as they load them.
bool attention_reads_bf16_operands(const DeviceTraits& device);

// Whether input `input` of `node` is read widened by every lowering of the node, whatever the
// device (rotations, embedding tables, converting copies, a normalization's gamma and beta, a
// cross-entropy's logits; not products, whose tensor-core paths load some dtypes only). Fusion
// keeps a widening cast read only by such inputs out of pointwise kernels, so that its readers bind
// the 16-bit tensor instead.
bool always_reads_widened(const Node& node, int input);

// Whether the node's lowering is a copy that loads operand 0 through the dtype-generic loader
// and stores through the generic store (permute, transpose): it then reads any float dtype and
// stores any float dtype, rounding as a cast does, so a cast on either side of it (widening or
// narrowing) is done by the copy itself (schedule/widened_loads.h, schedule/narrowed_stores.h).
bool converting_copy(const Node& node);

// Whether the node's lowering stores its result through the generic store, so that a single
// narrowing cast reading it can be stored by the node's own kernel instead (the value rounded
// as the cast rounds it): rotary embeddings, RMSNorm and LayerNorm, a cross-entropy's gradient,
// the converting copies.
bool stores_narrowed_result(const Node& node);

}  // namespace mn::codegen
