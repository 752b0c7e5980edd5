#pragma once
// What attention's training kernels (attention_lse, attention_grad_q/k/v) share, the
// register-tiled and scalar ones (lower_attention_training.cpp) and the tensor-core ones
// (lower_attention_training_coop.cpp): the sizes they bake in, their bindings and the mask's
// addressing.
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "codegen/kernel_template.h"
#include "ir/ops/attention.h"

namespace mn::codegen::attention_training {

enum class Form { lse, grad_q, grad_k, grad_v };

// The forms' operands: a tile of own rows is query rows (lse, dq) or key rows (dk, dv); dP =
// own_b · other_bᵀ needs own rows of dout or v (dq, dk); all but lse stream other rows of b.
inline bool query_own(Form f) { return f == Form::lse || f == Form::grad_q; }
inline bool has_own_b(Form f) { return f == Form::grad_q || f == Form::grad_k; }
inline bool has_other_b(Form f) { return f != Form::lse; }

// The sizes the kernels bake in (the op's inference has validated the operands: q, k, v share
// their leading axes) and the mask's strides over the scores [batch..., Hq, Lq, Lk].
struct TrainingShape {
  Form form;
  AttentionAttrs attrs;
  Shape batch;
  uint64_t hq = 1, hkv = 1, lq = 1, lk = 1, d = 1, dv = 1;
  std::vector<uint64_t> mask_strides;  // per axis of the scores, 0 where the mask broadcasts

  TrainingShape(const LowerContext& ctx, Form f);
  uint64_t batches() const { return static_cast<uint64_t>(numel(batch)); }
  // The own rows' heads per batch entry and rows per head: query heads and rows (lse, dq), key
  // and value heads and key rows (dk, dv).
  uint64_t own_heads() const { return query_own(form) ? hq : hkv; }
  uint64_t own_rows() const { return query_own(form) ? lq : lk; }
  // The workgroups of the row kernels: one per own row.
  uint64_t rows() const { return batches() * own_heads() * own_rows(); }
};

// The lanes of the scalar kernels (a workgroup per row of the result).
constexpr uint32_t kScalarLanes = 64;

// Bindings, sizes and helpers: the operands in their order (the mask last) and the output.
std::string declarations(const LowerContext& ctx, const TrainingShape& g,
                         std::vector<KernelBinding>& bindings);
// Statements defining `uint mbatch`, the mask's offset of batch b (from `b`), when masked.
std::string mask_batch(const TrainingShape& g);
// The template fields naming the operands a kernel's own rows (OWN_A, OWN_B) and the other
// side's blocks (OTHER_A, OTHER_B) load, as <operand><suffix> ("q_ld", "k8"): a is q or k, b
// is dout or v; "no_operand" where the form has none (names in the templates' disabled
// branches). Also the mask and block fields every form fills.
TemplateFields role_fields(const TrainingShape& g, const std::string& suffix);

// GLSL: the Block struct, block_of and block_count of kernels/attention_training_blocks.comp,
// the other side's blocks a tile of own rows walks (the templates' BLOCKS field).
std::string other_side_blocks();
// GLSL: uint mask_at(mbatch, h, i, j), the mask's element of score (batch offset mbatch, query
// head h, row i, key j); empty when unmasked.
std::string mask_function(const TrainingShape& g);

}  // namespace mn::codegen::attention_training
