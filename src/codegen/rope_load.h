#pragma once
// A rotary embedding (rope_positions) applied by the kernel that reads its result as it loads
// it: the cache_write storing rotated keys, the cached attention reading its rotated query.
// schedule/rope_fusion.h decides where; no launch and no barrier then sit between the rotation
// and its reader.
#include <cstdint>
#include <string>

#include "codegen/kernel.h"
#include "ir/ops/attention.h"

namespace mn::codegen {

struct RopeLoad {
  RopePositionsAttrs attrs;
  int operand = -1;          // the input read rotated (it holds the rope's x)
  int positions_input = -1;  // the input holding the rope's positions
};

// The error-free transformations computing cos and sin of 2 pi p w (p an integer position,
// w = hi + lo a fraction of a turn):
//   void mn_turn(float p, float hi, float lo, out float c, out float s)
std::string rope_turn_functions();
// A double as the GLSL literals of its nearest float and of the remainder (hi + lo).
std::pair<std::string, std::string> split_literal(double v);

// GLSL: mn_turn, the frequencies of a row of `dim` elements as constant tables, and
//   float mn_rope(float own, float partner, uint j, float p)
// element j (0 <= j < dim) of a row at position p rotated, given x_j (own) and its partner
// x_{j +- dim/2} (rope_partner).
std::string rope_load_library(const RopePositionsAttrs& a, uint64_t dim);
// The GLSL expression of element j's partner within its row: j + dim/2 or j - dim/2.
std::string rope_partner(const std::string& j, uint64_t dim);

// Whether the lowering of ctx.node reads operand ctx.rope->operand rotated: cache_write's update
// (of the cache's dtype), cached_attention's query where its row kernel runs.
bool takes_rope_load(const LowerContext& ctx);

}  // namespace mn::codegen
