// Attention's gradient ops on workgroup-scope tensor-addressed matrices:
// kernels/attention_training_tensor.comp filled for one node. Each matrix operand loads into bf16
// matrices through codegen/tensor_loads.h (bf16 tensors as they are, f32 and f16 ones rounded to
// nearest bf16).
#include "codegen/lower_attention_training_tensor.h"

#include <algorithm>
#include <string>
#include <vector>

#include "codegen/attention_tensor_tiles.h"
#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "codegen/lower_attention_training_coop.h"
#include "codegen/tensor_loads.h"

namespace mn::codegen::attention_training {

namespace {

// The tile of the form's own rows (queries for dQ, keys for dK and dV) over its grid.
AttentionTensorTile own_tile(const DeviceTraits& d, const TrainingShape& g) {
  return training_attention_tile(d, g.d, g.dv, g.batches() * g.own_heads(), g.own_rows());
}

// The blocks of the other side a tile of own rows from t0 walks: as block_count in
// kernels/attention_training_blocks.comp.
uint64_t tile_blocks(const TrainingShape& g, const AttentionTensorTile& t, uint64_t t0) {
  const bool causal = g.attrs.causal;
  if (query_own(g.form)) {
    const uint64_t reach = causal ? std::min(g.lk, t0 + t.rows) : g.lk;
    return (reach + t.cols - 1) / t.cols;
  }
  const uint64_t start = causal ? t0 : 0, group = g.hq / g.hkv;
  return g.lq > start ? group * ((g.lq - start + t.cols - 1) / t.cols) : 0;
}

}  // namespace

BlockSplit split_blocks(const DeviceTraits& d, const TrainingShape& g,
                        const AttentionTensorTile& t) {
  const uint64_t tiles = (g.own_rows() + t.rows - 1) / t.rows;
  std::vector<uint64_t> blocks(tiles);
  for (uint64_t i = 0; i < tiles; ++i) blocks[i] = tile_blocks(g, t, i * t.rows);
  return split_tile_blocks(d, blocks, g.batches() * g.own_heads(), d.tensor_attention_grad_fills);
}

namespace {

bool serves(const LowerContext& ctx, const TrainingShape& g) {
  const DeviceTraits& d = ctx.device;
  if (!d.tensor_attention || !d.coop_tensor || !d.coop_tensor_conversions) return false;
  if (g.form == Form::lse) return false;
  return training_attention_fits(own_tile(d, g), g.d, g.dv, d.coop_wg_bf16_granularity, d) &&
         bf16_operands_chosen(ctx);
}

}  // namespace

bool takes_tensor_training(const LowerContext& ctx, Form f) {
  return serves(ctx, TrainingShape(ctx, f));
}

std::optional<Lowering> tensor_training_kernel(const LowerContext& ctx, const TrainingShape& g) {
  if (!serves(ctx, g)) return std::nullopt;
  static const char* const names[] = {"", "attention_grad_q_tensor", "attention_grad_k_tensor",
                                      "attention_grad_v_tensor"};
  const Form f = g.form;
  const bool dv_too = f == Form::grad_k && ctx.grad_v_output.has_value();
  const uint64_t own_rows = g.own_rows(), own_heads = g.own_heads();
  const AttentionTensorTile tile = own_tile(ctx.device, g);
  const uint64_t tiles = (own_rows + tile.rows - 1) / tile.rows;
  const uint64_t groups = g.batches() * own_heads * tiles;
  const BlockSplit split = split_blocks(ctx.device, g, tile);
  KernelLaunch k;
  std::string decl = tensor_matrix_declarations(declarations(ctx, g, k.bindings), DType::bf16);
  if (dv_too) {
    decl +=
        glsl::buffer(static_cast<uint32_t>(k.bindings.size()), *ctx.grad_v_output, "out1", false);
    k.bindings.push_back({ArgRef::output(1), true});
  }
  Lowering low;
  const uint32_t partials_binding = static_cast<uint32_t>(k.bindings.size());
  if (split.splits > 1) {
    // Each tile's segments' results (R × (W [+ DV]) floats each), and the tiles' counters.
    const uint64_t width = (f == Form::grad_v ? g.dv : g.d) + (dv_too ? g.dv : 0);
    k.bindings.push_back({ArgRef::scratch(0), true});
    k.bindings.push_back({ArgRef::counters(0), true});
    low.scratch_bytes.push_back(split.splits * groups * tile.rows * width * sizeof(float));
    low.counter_bytes.push_back(groups * sizeof(uint32_t));
  }
  // The matrices' operands: q and k, then v or dout (grad_v), then dout (grad_q, grad_k).
  static const char* const operand_names[] = {"q", "k", "v", "dout"};
  const size_t operands = ops::attention_matrix_operands(ctx.node.op_name());
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
      {"EARLY_LOADS", ctx.device.tensor_attention_early_loads && split.splits == 1 ? "1" : "0"},
      {"W", std::to_string(f == Form::grad_v ? g.dv : g.d)},
      {"OWN_ROWS", std::to_string(own_rows)},
      {"OWN_HEADS", std::to_string(own_heads)},
      {"TILES", std::to_string(tiles)},
      {"R", std::to_string(tile.rows)},
      {"BK", std::to_string(tile.cols)},
      {"WG", std::to_string(tile.invocations)},
      {"SHARED_ROWS", std::to_string(std::max(tile.rows, tile.cols))},
      {"GROUPS", std::to_string(groups)},
      {"SPLITS", std::to_string(split.splits)},
      {"SEGMENT", std::to_string(split.segment)},
      {"SPLIT_PARTS",
       split.splits > 1 ? split_parts_declarations(partials_binding) : std::string()},
  };
  fields.merge(role_fields(g, ""));
  k.name = dv_too ? "attention_grad_kv_tensor" : names[static_cast<int>(f)];
  if (split.splits > 1) k.name += "_split" + std::to_string(split.splits);
  k.glsl = fill_kernel_template("attention_training_tensor.comp", fields);
  const uint32_t lanes = tile.invocations;
  k.workgroup = {lanes, 1, 1};
  k.groups = glsl::linear_grid(groups * split.splits * lanes, ctx.device, lanes).groups;
  k.current_compiler = true;
  low.launches.push_back(std::move(k));
  return low;
}

}  // namespace mn::codegen::attention_training
