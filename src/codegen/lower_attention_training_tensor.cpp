// Attention's gradient ops on workgroup-scope tensor-addressed matrices:
// kernels/attention_training_tensor.comp filled for one node. Each matrix operand loads into bf16
// matrices through codegen/tensor_loads.h (bf16 tensors as they are, f32 and f16 ones rounded to
// nearest bf16).
#include "codegen/lower_attention_training_tensor.h"

#include <algorithm>
#include <string>

#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_attention_training_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/tensor_loads.h"

namespace mn::codegen::attention_training {

namespace {

constexpr uint64_t kRows = 64, kMaxHead = 128;

// Workgroups of 128 invocations up to heads of 64, 256 above (the accumulators of a 64 × 128
// result and its operands would not fit 128 invocations' registers).
uint32_t invocations(const TrainingShape& g) { return std::max(g.d, g.dv) > 64 ? 256u : 128u; }

// Whether every matrix the kernel makes fits the device's bf16 workgroup-scope granularity: the
// R × D and R × DV own rows, the R × BK scores and weights, the D × BK and DV × BK blocks.
bool matrices_fit(const TrainingShape& g, const DeviceTraits& d) {
  const int r = static_cast<int>(kRows), dk = static_cast<int>(g.d), dv = static_cast<int>(g.dv);
  const uint32_t n = invocations(g);
  return workgroup_tile_fits(r, r, dk, n, d.coop_wg_bf16_granularity, d) &&
         workgroup_tile_fits(r, dk, r, n, d.coop_wg_bf16_granularity, d) &&
         workgroup_tile_fits(r, r, dv, n, d.coop_wg_bf16_granularity, d) &&
         workgroup_tile_fits(r, dv, r, n, d.coop_wg_bf16_granularity, d);
}

bool serves(const LowerContext& ctx, const TrainingShape& g) {
  const DeviceTraits& d = ctx.device;
  if (!d.tensor_attention || !d.coop_tensor || !d.coop_tensor_conversions) return false;
  if (g.form == Form::lse) return false;
  if (g.d % 16 != 0 || g.dv % 16 != 0 || g.d > kMaxHead || g.dv > kMaxHead) return false;
  return matrices_fit(g, d) && bf16_operands_chosen(ctx, g);
}

}  // namespace

bool takes_tensor_training(const LowerContext& ctx, Form f) {
  return serves(ctx, TrainingShape(ctx, f));
}

std::optional<KernelLaunch> tensor_training_kernel(const LowerContext& ctx,
                                                   const TrainingShape& g) {
  if (!serves(ctx, g)) return std::nullopt;
  static const char* const names[] = {"", "attention_grad_q_tensor", "attention_grad_k_tensor",
                                      "attention_grad_v_tensor"};
  const Form f = g.form;
  const bool dv_too = f == Form::grad_k && ctx.grad_v_output.has_value();
  const bool qown = query_own(f);
  const uint64_t own_rows = qown ? g.lq : g.lk, own_heads = qown ? g.hq : g.hkv;
  const uint64_t tiles = (own_rows + kRows - 1) / kRows;
  const uint64_t groups = g.batches() * own_heads * tiles;
  KernelLaunch k;
  std::string decl = glsl::require_extensions(
      declarations(ctx, g, k.bindings),
      {"GL_EXT_bfloat16", "GL_KHR_memory_scope_semantics", "GL_KHR_cooperative_matrix",
       "GL_NV_cooperative_matrix2", "GL_EXT_control_flow_attributes",
       "GL_EXT_shader_explicit_arithmetic_types_float16",
       "GL_EXT_shader_explicit_arithmetic_types_int32"});
  decl += glsl::half_conversions() + bf16_rounding_function();
  if (dv_too) {
    decl +=
        glsl::buffer(static_cast<uint32_t>(k.bindings.size()), *ctx.grad_v_output, "out1", false);
    k.bindings.push_back({ArgRef::output(1), true});
  }
  // The matrices' operands: q and k, then v or dout (grad_v), then dout (grad_q, grad_k).
  static const char* const operand_names[] = {"q", "k", "v", "dout"};
  const size_t operands = f == Form::grad_v ? 3 : 4;
  std::string loads;
  for (size_t i = 0; i < operands; ++i) {
    const std::string name = f == Form::grad_v && i == 2 ? "dout" : operand_names[i];
    loads += tensor_operand_loads(static_cast<uint32_t>(i), ctx.inputs[i].dtype, name, DType::bf16);
  }
  TemplateFields fields{
      {"DECLARATIONS", decl},
      {"OPERAND_LOADS", loads},
      {"FORM", std::to_string(static_cast<int>(f))},
      {"CAUSAL", g.attrs.causal ? "1" : "0"},
      {"HAS_MASK", g.attrs.has_mask ? "1" : "0"},
      {"WITH_DV", dv_too ? "1" : "0"},
      {"W", std::to_string(f == Form::grad_v ? g.dv : g.d)},
      {"OWN_ROWS", std::to_string(own_rows)},
      {"OWN_HEADS", std::to_string(own_heads)},
      {"TILES", std::to_string(tiles)},
      {"GROUPS", std::to_string(groups)},
  };
  fields.merge(role_fields(g, ""));
  k.name = dv_too ? "attention_grad_kv_tensor" : names[static_cast<int>(f)];
  k.glsl = fill_kernel_template("attention_training_tensor.comp", fields);
  const uint32_t lanes = invocations(g);
  k.workgroup = {lanes, 1, 1};
  k.groups = glsl::linear_grid(groups * lanes, ctx.device, lanes).groups;
  k.current_compiler = true;
  return k;
}

}  // namespace mn::codegen::attention_training
