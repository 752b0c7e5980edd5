#pragma once
// Matrix-vector products (a decoding step's every linear layer) absorb their neighbours, since
// at one token each kernel costs mostly its launch and the barrier after it:
//  - norm: a product whose vector is rms_norm(x, gamma) of one row computes the norm itself
//    (q/k/v, gate/up and the head read the normalized hidden state): the norm's kernel goes.
//  - sibling: a product whose epilogue reads another product of the same vector and matrix
//    shape (silu(x·Wgᵀ) · (x·Wuᵀ)) computes both in one pass over the vector: the other's
//    kernel goes. The tensor-addressed matmul kernel takes a sibling too, of any A (a prompt's
//    gate and up projections: one kernel and one barrier fewer per layer) unless
//    MN_TENSOR_SIBLING=0 (codegen::DeviceTraits::tensor_sibling).
//  - chain: a product whose stored value only another product reads, as its vector (a
//    decoding MLP: down(silu(gate) · up) + the residual), computes that product too: each
//    workgroup multiplies its outputs by their columns of the second matrix into a partial, and
//    the last one adds them (one launch and one barrier fewer a layer), where MN_GEMV_CHAIN=1
//    (codegen::DeviceTraits::gemv_chain; off by default: measured slower) and the sizes fit
//    (codegen::gemv_chain_threads).
// Products of many rows on the scalar tiled kernel (a denoising step's 50 action tokens, a
// prompt's rows where no tensor core takes them) take the sibling and, with MN_TILED_NORM=1,
// the norm too (codegen::tiled_takes_extras): a norm of many rows only where every one of its
// readers is such a product, so that its kernel and barrier go.
// A node's kernel is dropped only when nothing reads it any more. See codegen::GemvExtras.
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "schedule/fusion.h"

namespace mn::schedule {

// Fills KernelGroup::gemv where the kernels can take it and drops the groups left unread; the
// order of the remaining groups is kept.
void fuse_gemv_neighbours(const Graph& g, std::vector<KernelGroup>& groups,
                          const codegen::DeviceTraits& device);

}  // namespace mn::schedule
