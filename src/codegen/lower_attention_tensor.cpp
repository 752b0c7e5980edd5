// scaled_dot_product_attention on workgroup-scope tensor-addressed matrices:
// kernels/attention_tensor.comp filled for one node, its operands loaded through
// codegen/tensor_loads.h.
#include "codegen/lower_attention_tensor.h"

#include <algorithm>
#include <string>
#include <vector>

#include "codegen/attention_tensor_tiles.h"
#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "codegen/tensor_loads.h"

namespace mn::codegen::attention_lowering {
namespace {

constexpr uint64_t kMinPromptRows = 32;

// The matrices' component type: bf16 where an operand is bf16 (loaded as it is; f16 matrices
// would round it) or the log-sum-exp is saved for the bf16 training kernels, whose scores these
// then are; f16 otherwise.
DType matrix_type(const LowerContext& ctx) {
  const bool bf16 = ctx.inputs[0].dtype == DType::bf16 || ctx.inputs[1].dtype == DType::bf16 ||
                    ctx.inputs[2].dtype == DType::bf16;
  return bf16 || ctx.saved_lse ? DType::bf16 : DType::f16;
}

// How the tiles share their key blocks among workgroups (split_tile_blocks, for
// DeviceTraits::tensor_attention_fills fills of the device); at positions, where the blocks a
// tile walks are known only on the device, none.
BlockSplit forward_split(const DeviceTraits& d, const AttentionShape& g,
                         const AttentionTensorTile& t) {
  if (g.has_positions) return {};
  const uint64_t tiles = (g.lq + t.rows - 1) / t.rows;
  std::vector<uint64_t> blocks(tiles);
  for (uint64_t i = 0; i < tiles; ++i) {
    // The keys the tile reaches, as the kernel's reach (attention_shape.h's tile_reach).
    const uint64_t reach =
        g.attrs.causal ? std::min(g.lk, std::min(i * t.rows + t.rows, g.lq)) : g.lk;
    blocks[i] = (reach + t.cols - 1) / t.cols;
  }
  return split_tile_blocks(d, blocks, g.heads(), d.tensor_attention_fills);
}

}  // namespace

bool takes_tensor_forward(const LowerContext& ctx, const AttentionShape& g) {
  const DeviceTraits& d = ctx.device;
  if (!d.tensor_attention || !d.coop_tensor || !d.coop_tensor_conversions ||
      !d.coop_tensor_reductions || d.coop_attention == DeviceTraits::Choice::never) {
    return false;
  }
  // No rotation applied or cache slot read from a write as the operands load.
  const std::string_view op = ctx.node.op_name();
  if ((op != "scaled_dot_product_attention" && op != "cached_attention") || ctx.rope ||
      ctx.append) {
    return false;
  }
  // Prompts at positions when asked for; a few rows at positions (decoding) would leave most of a
  // tile idle: the row kernels split the keys instead.
  if (g.has_positions &&
      (!d.tensor_prompt_attention ||
       (g.lq < kMinPromptRows && d.coop_attention != DeviceTraits::Choice::always))) {
    return false;
  }
  // f16 and bf16 matrices alike (the operands' dtype chooses).
  const AttentionTensorTile t = forward_attention_tile(d, g.d, g.dv, g.heads(), g.lq);
  return forward_attention_fits(t, g.d, g.dv, d.coop_wg_granularity, d) &&
         forward_attention_fits(t, g.d, g.dv, d.coop_wg_bf16_granularity, d);
}

Lowering tensor_attention_kernel(const LowerContext& ctx, const AttentionShape& g) {
  if (!takes_tensor_forward(ctx, g)) {
    throw Error("attention lowering: this attention does not suit the tensor-addressed kernel");
  }
  const AttentionAttrs& a = g.attrs;
  KernelLaunch k;
  const DType matrix = matrix_type(ctx);
  std::string decl =
      tensor_matrix_declarations(declarations(ctx, g, a.has_mask, k.bindings), matrix);
  decl += saved_lse_binding(ctx, k);
  decl += scale_function(ctx, a, g.d);
  std::string loads;
  for (uint32_t i = 0; i < 3; ++i) {
    loads += tensor_operand_loads(i, ctx.inputs[i].dtype,
                                  i == 0   ? "q"
                                  : i == 1 ? "k"
                                           : "v",
                                  matrix);
  }
  const size_t R = g.rank;
  const uint64_t mask_row_stride =
      a.has_mask && g.mask[R - 2] != 1 ? static_cast<uint64_t>(g.mask[R - 1]) : 0;
  const uint64_t mask_key_stride = a.has_mask && g.mask[R - 1] != 1 ? 1 : 0;
  const AttentionTensorTile tile = forward_attention_tile(ctx.device, g.d, g.dv, g.heads(), g.lq);
  const uint64_t tiles = (g.lq + tile.rows - 1) / tile.rows;
  const BlockSplit split = forward_split(ctx.device, g, tile);
  Lowering low;
  const auto partials_binding = static_cast<uint32_t>(k.bindings.size());
  if (split.splits > 1) {
    // Each tile's segments' O, M and L (BR × (DV + 2 BC) floats each), and the tiles' counters.
    k.bindings.push_back({ArgRef::scratch(0), true});
    k.bindings.push_back({ArgRef::counters(0), true});
    low.scratch_bytes.push_back(split.splits * g.heads() * tiles * tile.rows *
                                (g.dv + 2 * tile.cols) * sizeof(float));
    low.counter_bytes.push_back(g.heads() * tiles * sizeof(uint32_t));
  }
  const TemplateFields fields{
      {"DECLARATIONS", decl},
      {"OPERAND_LOADS", loads},
      {"HAS_MASK", a.has_mask ? "1" : "0"},
      {"CAUSAL", a.causal ? "1" : "0"},
      {"SAVES_LSE", ctx.saved_lse ? "1" : "0"},
      {"HAS_POSITIONS", g.has_positions ? "1" : "0"},
      // Not yet measured on prompts at positions: they keep each load where it is used.
      {"EARLY_LOADS",
       ctx.device.tensor_attention_early_loads && split.splits == 1 && !g.has_positions ? "1"
                                                                                        : "0"},
      {"REACH_SHARED", g.has_positions ? "shared uint reach_sh[BR];" : ""},
      {"REACH", tile_reach(g, "BR")},
      {"BR", std::to_string(tile.rows)},
      {"BC", std::to_string(tile.cols)},
      {"DV_IS_BC", g.dv == tile.cols ? "1" : "0"},
      {"TILES", std::to_string(tiles)},
      {"HEADS", std::to_string(g.heads())},
      {"SPLITS", std::to_string(split.splits)},
      {"SEGMENT", std::to_string(split.segment)},
      {"SPLIT_PARTS",
       split.splits > 1 ? split_parts_declarations(partials_binding) : std::string()},
      {"MASK_ROW_STRIDE", std::to_string(mask_row_stride)},
      {"MASK_KEY_STRIDE", std::to_string(mask_key_stride)},
      {"HEAD_OFFSETS", head_offsets(g, a.has_mask, "0u")},
      // P's bf16 matrix rounded to nearest, as the training kernels round their weights.
      {"ROUND_P", matrix == DType::bf16 ? "    coopMatPerElementNV(p, p, to_bf16);" : ""},
  };
  k.name = "attention_tensor";
  if (split.splits > 1) k.name += "_split" + std::to_string(split.splits);
  k.glsl = fill_kernel_template("attention_tensor.comp", fields);
  const uint32_t lanes = tile.invocations;
  k.workgroup = {lanes, 1, 1};
  k.groups = glsl::linear_grid(g.heads() * tiles * split.splits * lanes, ctx.device, lanes).groups;
  k.current_compiler = true;
  low.launches.push_back(std::move(k));
  return low;
}

}  // namespace mn::codegen::attention_lowering
