#pragma once
// Mixed precision: the products of a graph computed from 16-bit operands, as PyTorch's autocast
// does. Every matmul of f32 operands with at least 16 rows and 16 columns (smaller ones are
// matrix-vector products, bound by reading the weights) becomes
// cast(matmul(cast(a, p), cast(b, p)), f32): the
// operands are rounded to p (bf16 or f16), the product accumulates in f32 and is stored in p,
// and its consumers read it widened back to f32. Everything else (norms, softmax, losses,
// reductions, the optimizer's master weights and states) stays in f32. Applied to a training
// graph after differentiation, the backward products are 16-bit too. (Attention stays on f32
// operands unless MixedPrecisionOptions::attention_operands: its register-tiled training kernels
// read 16-bit ones slower, docs/perf.md; with bf16 products, devices with bf16 matrices round
// them to bf16 inside attention's training kernels, codegen/lower_attention_training_coop.h.)
//
// An operand that is already a widening of a p tensor (a bf16 weight read as f32) is used as it
// is, so a model stored in p is not rounded twice. Runs before the e-graph (plan::make_step_plan),
// so the casts fuse into their producers and consumers like any pointwise op.
#include <meganeura/dtype.h>
#include <meganeura/graph.h>

namespace mn::optimize {

struct MixedPrecisionOptions {
  // Attention's q, k and v (and a gradient op's dout) read rounded to the precision too, as
  // autocast runs attention: cast(cast(x, p), f32), whose narrowing the producer's kernel
  // stores (a rotation's result, a product's 16-bit value) and whose widening the attention
  // kernel reads itself. For devices whose attention kernels take 16-bit tensor-addressed
  // matrices (codegen::attention_reads_bf16_operands), where they load the 16-bit tensors with
  // no conversion and no f32 copy exists; elsewhere attention keeps its f32 operands.
  bool attention_operands = false;
};

// The rewritten graph (same inputs, parameters, states, outputs and assignments). `precision`
// f32 copies the graph; bf16 and f16 rewrite it; any other dtype is an mn::Error.
Graph with_mixed_precision(const Graph& g, DType precision, const MixedPrecisionOptions& o = {});

// Casts between f32 and 16-bit formats moved across the data-movement ops next to them (reshape,
// permute, transpose, squeeze, unsqueeze, broadcast_to, slice), which commute with them exactly:
// a widening of a computed 16-bit value moves after the movement (towards the consumers, whose
// pointwise kernels then absorb it; the movement moves half the bytes), a narrowing moves
// before it (towards the producer, whose kernel then stores the 16-bit value). Run on the
// lowered graph (plan::make_step_plan, with mixed precision), where the e-graph and the GPU
// lowering have put reshapes around products. Widenings of stored tensors stay where they are
// (schedule/widened_loads.h reads them widened). A 16-bit value widened and narrowed back to
// its dtype (a product's bf16 result read by another product after a movement) is read as it is.
Graph casts_through_movement(const Graph& g);

}  // namespace mn::optimize
