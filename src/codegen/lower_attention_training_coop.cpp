// Attention's training ops on tensor cores: kernels/attention_training_coop.comp filled for one
// node. Its operands go to the matrices as bf16 in 16-byte units of 8 elements (unit views
// below); bf16 tensors as they are stored, f32 and f16 ones rounded.
#include "codegen/lower_attention_training_coop.h"

#include <algorithm>
#include <string>

#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_attention_training_tensor.h"

namespace mn::codegen::attention_training {

namespace {

using glsl::ulit;

constexpr uint64_t kRows = 64, kLanes = 128, kMaxHead = 128;

// 16-byte units of kv: the own rows of either operand, or a block's a and b rows.
uint64_t kv_units(const TrainingShape& g, uint64_t block) {
  const uint64_t as = g.d / 8 + 1, bs = g.dv / 8 + 1;
  uint64_t units = std::max(kRows * as, block * (as + (has_other_b(g.form) ? bs : 0)));
  if (has_own_b(g.form)) units = std::max(units, kRows * bs);
  return units;
}

uint64_t shared_bytes(const TrainingShape& g, uint64_t block) {
  uint64_t bytes = kv_units(g, block) * 16 + 4 * 16 * block * 4;  // kv, sc
  if (g.form != Form::lse) bytes += 4 * 16 * block * 2;           // wt (P, then dS, with dV)
  if (!query_own(g.form)) bytes += 2 * block * 4;                 // lse_sh, delta_sh
  if (g.form == Form::lse) bytes += 4 * 32 * 8;                   // pair_sh
  return bytes;
}

// attention_grad_k asked to store attention_grad_v beside dK (LowerContext::grad_v_output).
bool with_dv(const LowerContext& ctx, const TrainingShape& g) {
  return g.form == Form::grad_k && ctx.grad_v_output.has_value();
}

// The keys (or query rows) per block: the largest whose shared memory the device has.
std::optional<uint64_t> block_rows(const LowerContext& ctx, const TrainingShape& g) {
  const DeviceTraits& d = ctx.device;
  if (!d.coop || !d.coop_bf16 || d.coop_attention == DeviceTraits::Choice::never ||
      d.subgroup_size != 32 || d.max_workgroup_invocations < kLanes) {
    return std::nullopt;
  }
  if (g.d % 16 != 0 || g.dv % 16 != 0 || g.d > kMaxHead || g.dv > kMaxHead) return std::nullopt;
  if (!bf16_operands_chosen(ctx)) return std::nullopt;
  for (uint64_t block : {64u, 32u, 16u}) {
    if (shared_bytes(g, block) <= d.max_shared_bytes) return block;
  }
  return std::nullopt;
}

// GLSL: uvec4 <name>8(uint at), elements at .. at + 7 (at a multiple of 8) of binding
// `binding` as bf16, two to a word, the lower element in the low half.
std::string unit_view(uint32_t binding, DType dtype, const std::string& name) {
  const std::string b = std::to_string(binding), data = name + "8_data";
  std::string s = "layout(std430, set = 0, binding = " + b + ") readonly buffer Units" + b + " { ";
  if (dtype == DType::bf16) {
    return s + "uvec4 " + data + "[]; };\nuvec4 " + name + "8(uint at) { return " + data +
           "[at >> 3]; }\n";
  }
  if (dtype == DType::f16) {
    s += "uvec4 " + data + "[]; };\n";
    s += "uint " + name + "_bf2(uint h2) { return mn_f32_to_bf16(mn_f16_to_f32(h2 & 0xffffu)) | " +
         "(mn_f32_to_bf16(mn_f16_to_f32(h2 >> 16)) << 16); }\n";
    return s + "uvec4 " + name + "8(uint at) { uvec4 u = " + data + "[at >> 3]; return uvec4(" +
           name + "_bf2(u.x), " + name + "_bf2(u.y), " + name + "_bf2(u.z), " + name +
           "_bf2(u.w)); }\n";
  }
  s += "vec4 " + data + "[]; };\n";
  s += "uint " + name +
       "_bf2(vec2 v) { return mn_f32_to_bf16(v.x) | (mn_f32_to_bf16(v.y) << 16); }\n";
  return s + "uvec4 " + name + "8(uint at) { vec4 a = " + data + "[at >> 2], c = " + data +
         "[(at >> 2) + 1u]; return uvec4(" + name + "_bf2(a.xy), " + name + "_bf2(a.zw), " + name +
         "_bf2(c.xy), " + name + "_bf2(c.zw)); }\n";
}

// Whether the operands the matrices read are all 16-bit.
bool operands_16bit(const LowerContext& ctx) {
  const size_t n = ops::attention_matrix_operands(ctx.node.op_name());
  for (size_t i = 0; i < n; ++i) {
    if (ctx.inputs[i].dtype != DType::bf16 && ctx.inputs[i].dtype != DType::f16) return false;
  }
  return true;
}

}  // namespace

bool bf16_operands_chosen(const LowerContext& ctx) {
  const DeviceTraits& d = ctx.device;
  if (d.coop_attention == DeviceTraits::Choice::never) return false;
  return d.coop_attention == DeviceTraits::Choice::always || d.bf16_products || operands_16bit(ctx);
}

bool takes_coop_training(const LowerContext& ctx, Form f) {
  return block_rows(ctx, TrainingShape(ctx, f)).has_value();
}

bool takes_grad_kv(const LowerContext& ctx) {
  if (ctx.node.op_name() != "attention_grad_k" || !ctx.grad_v_output) return false;
  return takes_tensor_training(ctx, Form::grad_k) || takes_coop_training(ctx, Form::grad_k);
}

std::optional<KernelLaunch> coop_training_kernel(const LowerContext& ctx, const TrainingShape& g) {
  const std::optional<uint64_t> block = block_rows(ctx, g);
  if (!block) return std::nullopt;
  static const char* const names[] = {"attention_lse_coop", "attention_grad_q_coop",
                                      "attention_grad_k_coop", "attention_grad_v_coop"};
  const Form f = g.form;
  const bool dv_too = with_dv(ctx, g);
  const uint64_t own_rows = g.own_rows(), own_heads = g.own_heads();
  const uint64_t tiles = (own_rows + kRows - 1) / kRows;
  const uint64_t groups = g.batches() * own_heads * tiles;
  const uint64_t width = f == Form::grad_v ? g.dv : g.d;
  KernelLaunch k;
  std::string decl = glsl::require_extensions(
      declarations(ctx, g, k.bindings),
      {"GL_EXT_bfloat16", "GL_KHR_memory_scope_semantics", "GL_KHR_cooperative_matrix",
       "GL_KHR_shader_subgroup_basic", "GL_EXT_control_flow_attributes"});
  decl += glsl::half_conversions();  // the bf16 rounding, whatever the operands' dtypes
  if (dv_too) {
    // dV after dK's binding (declarations' last).
    decl +=
        glsl::buffer(static_cast<uint32_t>(k.bindings.size()), *ctx.grad_v_output, "out1", false);
    k.bindings.push_back({ArgRef::output(1), true});
  }
  // The matrices' operands: q and k, then v or dout (grad_v), then dout (grad_q, grad_k).
  static const char* const operand_names[] = {"q", "k", "v", "dout"};
  const size_t operands = ops::attention_matrix_operands(ctx.node.op_name());
  for (size_t i = 0; i < operands; ++i) {
    const std::string name = f == Form::grad_v && i == 2 ? "dout" : operand_names[i];
    decl += unit_view(static_cast<uint32_t>(i), ctx.inputs[i].dtype, name);
  }
  const bool c_is_b = f == Form::grad_v;
  TemplateFields fields{
      {"DECLARATIONS", decl},
      {"FORM", std::to_string(static_cast<int>(f))},
      {"CAUSAL", g.attrs.causal ? "1" : "0"},
      {"HAS_MASK", g.attrs.has_mask ? "1" : "0"},
      {"WITH_DV", dv_too ? "1" : "0"},
      {"BK", std::to_string(*block)},
      {"W", std::to_string(f == Form::lse ? 16 : width)},
      {"OWN_ROWS", std::to_string(own_rows)},
      {"OWN_HEADS", std::to_string(own_heads)},
      {"TILES", std::to_string(tiles)},
      {"GROUPS", std::to_string(groups)},
      {"KV_UNITS", std::to_string(kv_units(g, *block))},
      {"C_OFF", c_is_b ? "BOFF" : "0u"},
      {"C_S", c_is_b ? "BS" : "AS"},
  };
  k.name = dv_too ? "attention_grad_kv_coop" : names[static_cast<int>(f)];
  fields.merge(role_fields(g, "8"));
  k.glsl = fill_kernel_template("attention_training_coop.comp", fields);
  k.workgroup = {static_cast<uint32_t>(kLanes), 1, 1};
  k.groups = glsl::linear_grid(groups * kLanes, ctx.device, kLanes).groups;
  k.current_compiler = true;
  return k;
}

}  // namespace mn::codegen::attention_training
