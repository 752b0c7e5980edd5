// The rotation of rope_positions, as GLSL functions that the rope kernels and the kernels
// loading a rotated operand (codegen/rope_load.h) share.
//
// The angle of pair i at position p is p w_i turns, w_i = inv_freq_i / (2 pi). For large
// positions its fraction of a turn needs w_i far beyond f32: w_i is carried as a pair of floats
// (hi + lo) and p w_i is formed exactly (Dekker's product), so f32 kernels keep up with the
// float64 reference.
#include "codegen/rope_load.h"

#include <numbers>

#include "codegen/glsl.h"
#include "codegen/lower_attention.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

// `precise` keeps compilers from fusing or reassociating the error-free transformations.
const char* kTurn = R"(
// a b = p + e exactly (Veltkamp splits, no fused multiply-add needed).
void mn_two_prod(float a, float b, out float p, out float e) {
  precise float prod = a * b;
  precise float ca = 4097.0 * a;
  precise float ah = ca - (ca - a);
  precise float al = a - ah;
  precise float cb = 4097.0 * b;
  precise float bh = cb - (cb - b);
  precise float bl = b - bh;
  precise float err = ((ah * bh - prod) + ah * bl + al * bh) + al * bl;
  p = prod;
  e = err;
}
// cos and sin of 2 pi p (hi + lo) for an integer position p < 2^24.
void mn_turn(float p, float hi, float lo, out float c, out float s) {
  float prod, err;
  mn_two_prod(p, hi, prod, err);
  precise float t = (prod - round(prod)) + (err + p * lo);
  precise float r = t - round(t);
  precise float angle = r * 6.28318530717958647;
  c = cos(angle);
  s = sin(angle);
}
)";

}  // namespace

std::string rope_turn_functions() { return kTurn; }

std::pair<std::string, std::string> split_literal(double v) {
  const auto hi = static_cast<float>(v);
  return {glsl::float_literal(hi), glsl::float_literal(v - static_cast<double>(hi))};
}

std::string rope_load_library(const RopePositionsAttrs& a, uint64_t dim) {
  const uint64_t half = dim / 2;
  const std::vector<double> inv_freq = ops::rope_inv_freq(a, static_cast<int64_t>(dim));
  std::string hi, lo;
  for (uint64_t i = 0; i < half; ++i) {
    auto [h, l] = split_literal(inv_freq[i] / (2.0 * std::numbers::pi));
    hi += (i ? ", " : "") + h;
    lo += (i ? ", " : "") + l;
  }
  // Constant tables: each kernel reads a row's frequencies once per element it loads, which
  // for the loads rotated here (a query row, a block of keys) is a few dozen reads.
  std::string s = kTurn;
  s += "const float ROPE_HI[" + ulit(half) + "] = float[](" + hi + ");\n";
  s += "const float ROPE_LO[" + ulit(half) + "] = float[](" + lo + ");\n";
  s += "float mn_rope(float own, float partner, uint j, float p) {\n";
  s += "  uint k = j % " + ulit(half) + ";\n  float c, s;\n";
  s += "  mn_turn(p, ROPE_HI[k], ROPE_LO[k], c, s);\n";
  s += "  return j < " + ulit(half) + " ? own * c - partner * s : own * c + partner * s;\n}\n";
  return s;
}

std::string rope_partner(const std::string& j, uint64_t dim) {
  const std::string half = ulit(dim / 2);
  return "(" + j + " < " + half + " ? " + j + " + " + half + " : " + j + " - " + half + ")";
}

bool takes_rope_load(const LowerContext& ctx) {
  if (!ctx.rope) return false;
  const std::string_view op = ctx.node.op_name();
  if (op == "cache_write") {
    const TensorType &cache = ctx.inputs[0], &x = ctx.inputs[1];
    // The rotation in f32, stored rounded to the cache's dtype (which may be narrower).
    return ctx.rope->operand == 1 && is_float(cache.dtype) && is_float(x.dtype) && x.rank() >= 1 &&
           x.shape.back() % 2 == 0;
  }
  return op == "cached_attention" && attention_lowering::row_kernel_reads_rope(ctx);
}

}  // namespace mn::codegen
