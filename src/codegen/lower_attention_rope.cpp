// rope and rope_backward: one thread per (row, pair), rotating the pair by the position's angle.
//
// The angle of pair i at position p is p w_i turns, w_i = theta^(-2i/D) / (2 pi), formed exactly
// from w_i as a pair of floats (codegen/rope_load.h: mn_turn). The w_i themselves come from two small tables, w_{32a+b} = U_a V_b, held
// in shared memory: a table of every w_i would be a constant array indexed per lane, which
// serializes (NVIDIA: nearly 3x the kernel's time) and compiles slowly for wide heads (lavapipe).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "codegen/glsl.h"
#include "codegen/lower_attention.h"
#include "codegen/rope_load.h"
#include "ir/ops/attention.h"

namespace mn::codegen::attention_lowering {

namespace {

using glsl::ulit;

const char* kFrequency = R"(
// w_k = U_k/32 V_k%32 as hi + lo.
void mn_frequency(uint k, out float hi, out float lo) {
  uint a = k / 32u, b = k % 32u;
  float uh = U_HI[a], ul = U_LO[a], vh = V_HI[b], vl = V_LO[b];
  float e;
  mn_two_prod(uh, vh, hi, e);
  precise float rest = e + (uh * vl + ul * vh);
  lo = rest;
}
)";


// Statements filling shared tables (`stores`) before a barrier: one lane of each 32 writes a
// share of them.
std::string table_fill(const std::vector<std::string>& stores, const glsl::Linear& grid) {
  const uint64_t writers = std::max<uint32_t>(grid.local / 32, 1);
  const uint64_t per_writer = (stores.size() + writers - 1) / writers;
  std::string fill;
  for (size_t i = 0; i < stores.size(); ++i) {
    if (i % per_writer == 0) {
      fill += std::string(i ? "  }\n" : "") +
              "  if (gl_LocalInvocationID.x == " + ulit(i / per_writer * 32) + ") {\n";
    }
    fill += "    " + stores[i] + "\n";
  }
  return fill + "  }\n  barrier();\n";
}

}  // namespace

// One thread per (row, pair i): y_i = x_i c - x_{i+D/2} s, y_{i+D/2} = x_{i+D/2} c + x_i s, with
// s negated for rope_backward.
Lowering lower_rope(const LowerContext& ctx, bool backward) {
  glsl::require_storage(ctx);
  const auto& a = ctx.node.attrs.as<RopeAttrs>();
  const Shape& shape = ctx.inputs[0].shape;
  const auto dim = static_cast<uint64_t>(shape.back());
  const auto length = static_cast<uint64_t>(shape[shape.size() - 2]);
  const uint64_t half = dim / 2;
  const uint64_t pairs = static_cast<uint64_t>(ctx.inputs[0].numel()) / 2;
  if (pairs == 0) return {};

  // U_a = theta^(-64a/D) / (2 pi), V_b = theta^(-2b/D), both from the reference's formula.
  const uint64_t nu = (half + 31) / 32;
  const uint64_t nv = std::min<uint64_t>(half, 32);
  const auto power = [&](uint64_t i) {
    return 1.0 / std::pow(a.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  };
  std::vector<std::string> stores;
  for (uint64_t i = 0; i < nu; ++i) {
    auto [h, l] = split_literal(power(32 * i) / (2.0 * std::numbers::pi));
    stores.push_back("U_HI[" + std::to_string(i) + "] = " + h + "; U_LO[" + std::to_string(i) +
                     "] = " + l + ";");
  }
  for (uint64_t i = 0; i < nv; ++i) {
    auto [h, l] = split_literal(power(i));
    stores.push_back("V_HI[" + std::to_string(i) + "] = " + h + "; V_LO[" + std::to_string(i) +
                     "] = " + l + ";");
  }
  const glsl::Linear grid = glsl::linear_grid(pairs, ctx.device);
  const std::string fill = table_fill(stores, grid);

  std::string s = glsl::header() + glsl::buffer(0, ctx.inputs[0].dtype, "x", true) +
                  glsl::buffer(1, ctx.node.type.dtype, "out", false);
  s += "shared float U_HI[" + ulit(nu) + "], U_LO[" + ulit(nu) + "], V_HI[" + ulit(nv) +
       "], V_LO[" + ulit(nv) + "];\n";
  s += rope_turn_functions() + kFrequency + glsl::gid_function() + "void main() {\n" + fill;
  s += "  uint i = gid();\n  if (i >= " + ulit(pairs) + ") return;\n";
  s += "  uint row = i / " + ulit(half) + ", k = i % " + ulit(half) + ";\n";
  // Positions are exact in f32 below 2^24; the offset can be negative.
  s += "  float p = float(row % " + ulit(length) + ") + " +
       glsl::float_literal(static_cast<double>(a.position_offset)) + ";\n";
  s += "  float wh, wl, c, s;\n  mn_frequency(k, wh, wl);\n  mn_turn(p, wh, wl, c, s);\n";
  if (backward) s += "  s = -s;\n";
  s += "  uint e1 = row * " + ulit(dim) + " + k, e2 = e1 + " + ulit(half) + ";\n";
  s += "  float x1 = x_ld(e1), x2 = x_ld(e2);\n";
  s += "  out_st(e1, x1 * c - x2 * s);\n  out_st(e2, x2 * c + x1 * s);\n}\n";
  KernelLaunch k;
  k.name = backward ? "rope_backward" : "rope";
  k.glsl = std::move(s);
  k.workgroup = {grid.local, 1, 1};
  k.groups = grid.groups;
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::output(), true}};
  Lowering low;
  low.launches.push_back(std::move(k));
  return low;
}

namespace {

// The GLSL offset of row `c` (its coordinates c0.., the last axis excluded) of `shape` in a
// tensor stored as permute(stored, perm)'s operand would be: sum c_d * stride[perm[d]]; without
// perm, row * dim.
std::string row_offset(const Shape& shape, const Shape& stored, const std::vector<int64_t>* perm,
                       uint64_t dim) {
  if (!perm) return "row * " + ulit(dim);
  const Shape strides = contiguous_strides(stored);
  std::string s;
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    const auto stride = static_cast<uint64_t>(strides[static_cast<size_t>((*perm)[d])]);
    if (shape[d] == 1 || stride == 0) continue;
    s += (s.empty() ? "" : " + ") + std::string("c") + std::to_string(d) + " * " + ulit(stride);
  }
  return s.empty() ? "0u" : s;
}

// out = permute(v, perm) stores v's element at coordinates c where out's coordinates are
// c[perm[j]]: the strides of v's axes in out's layout.
Shape permuted_store_shape(const Shape& shape, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) out[j] = shape[static_cast<size_t>(perm[j])];
  return out;
}

// One rotation of a rope_positions kernel: its operand's and result's buffers, its own shape and
// the layouts they are stored in.
struct Rotation {
  std::string x, out;  // buffer names
  DType x_dtype, out_dtype;
  Shape shape, stored_x;  // the rotation's shape; its operand's as stored
  const std::vector<int64_t>* load_perm = nullptr;
  const std::vector<int64_t>* store_perm = nullptr;
  uint64_t pairs() const { return static_cast<uint64_t>(numel(shape)) / 2; }
};

// `void <fn>(uint i)`: pair i of the rotation, at the position of its row.
std::string rotation_function(const std::string& fn, const Rotation& r, const Shape& positions_in,
                              bool backward) {
  const uint64_t dim = static_cast<uint64_t>(r.shape.back()), half = dim / 2;
  const Shape rows(r.shape.begin(), r.shape.end() - 1);
  Shape positions = positions_in;
  positions.insert(positions.begin(), rows.size() - positions.size(), 1);
  std::string s = "void " + fn + "(uint i) {\n";
  s += "  uint row = i / " + ulit(half) + ", k = i % " + ulit(half) + ";\n";
  s += glsl::unravel(rows, "row", "c");
  // Positions are exact in f32 below 2^24 in magnitude.
  s += "  float p = float(pos_ldi(" + glsl::broadcast_offset(positions, rows, "c") + "));\n";
  s += "  float c, s;\n  mn_turn(p, W_HI[k], W_LO[k], c, s);\n";
  if (backward) s += "  s = -s;\n";
  // The operand's and the result's rows, each where its layout puts it (the last axis stays).
  const std::string load_row = row_offset(r.shape, r.stored_x, r.load_perm, dim);
  std::string store_row = row_offset(r.shape, r.shape, nullptr, dim);
  if (r.store_perm) {
    // Axis d of the result is axis j of the stored tensor where store_perm[j] = d.
    std::vector<int64_t> inverse(r.store_perm->size());
    for (size_t j = 0; j < inverse.size(); ++j) {
      inverse[static_cast<size_t>((*r.store_perm)[j])] = static_cast<int64_t>(j);
    }
    store_row = row_offset(r.shape, permuted_store_shape(r.shape, *r.store_perm), &inverse, dim);
  }
  s += "  uint x1i = " + load_row + " + k, x2i = x1i + " + ulit(half) + ";\n";
  s += "  uint e1 = " + store_row + " + k, e2 = e1 + " + ulit(half) + ";\n";
  s += "  float x1 = " + r.x + "_ld(x1i), x2 = " + r.x + "_ld(x2i);\n";
  s += "  " + r.out + "_st(e1, x1 * c - x2 * s);\n  " + r.out + "_st(e2, x2 * c + x1 * s);\n}\n";
  return s;
}

}  // namespace

// rope_positions: as rope with the position of each row read from the i32 positions operand,
// and the frequencies (possibly llama3-rescaled, so not a product of two tables) in one shared
// table of w_i = inv_freq_i / (2 pi) as hi + lo. A stacked rotation (another tensor rotated by
// the same positions) runs in the same launch, its pairs after this one's.
Lowering lower_rope_positions(const LowerContext& ctx, bool backward) {
  glsl::require_storage(ctx);
  const auto& a = ctx.node.attrs.as<RopePositionsAttrs>();
  // The rotation's own shape; its operand may be stored permuted (ctx.load_perm).
  const Shape& shape = ctx.node.type.shape;
  const auto dim = static_cast<uint64_t>(shape.back());
  const uint64_t half = dim / 2;
  std::vector<Rotation> rotations{{"x", "out", ctx.inputs[0].dtype, ctx.node.type.dtype, shape,
                                   ctx.inputs[0].shape, ctx.load_perm, ctx.store_perm}};
  if (const StackedRotation* st = ctx.stacked_rotation) {
    const TensorType& in = ctx.inputs[static_cast<size_t>(st->input)];
    if (st->shape.empty() || st->shape.back() != shape.back()) {
      throw Error("rope_positions: a stacked rotation needs heads of " + std::to_string(dim) +
                  " elements");
    }
    rotations.push_back({"x1", "out1", in.dtype, st->out_dtype, st->shape, in.shape, st->load_perm,
                         st->store_perm});
  }
  uint64_t pairs = 0;
  for (const Rotation& r : rotations) pairs += r.pairs();
  if (pairs == 0) return {};

  const std::vector<double> inv_freq = ops::rope_inv_freq(a, static_cast<int64_t>(dim));
  std::vector<std::string> stores;
  for (uint64_t i = 0; i < half; ++i) {
    auto [h, l] = split_literal(inv_freq[i] / (2.0 * std::numbers::pi));
    stores.push_back("W_HI[" + std::to_string(i) + "] = " + h + "; W_LO[" + std::to_string(i) +
                     "] = " + l + ";");
  }
  const glsl::Linear grid = glsl::linear_grid(pairs, ctx.device);
  std::string s = glsl::header() + glsl::buffer(0, ctx.inputs[0].dtype, "x", true) +
                  glsl::buffer(1, DType::i32, "pos", true) +
                  glsl::buffer(2, ctx.node.type.dtype, "out", false);
  if (rotations.size() > 1) {
    s += glsl::buffer(3, rotations[1].x_dtype, "x1", true) +
         glsl::buffer(4, rotations[1].out_dtype, "out1", false);
  }
  s += "shared float W_HI[" + ulit(half) + "], W_LO[" + ulit(half) + "];\n";
  s += rope_turn_functions();
  for (size_t j = 0; j < rotations.size(); ++j) {
    s += rotation_function("mn_rotate" + std::to_string(j), rotations[j], ctx.inputs[1].shape,
                           backward);
  }
  s += glsl::gid_function() + "void main() {\n" + table_fill(stores, grid);
  s += "  uint i = gid();\n";
  uint64_t first = 0;
  for (size_t j = 0; j < rotations.size(); ++j) {
    const uint64_t end = first + rotations[j].pairs();
    s += "  " + std::string(j ? "else " : "") + "if (i < " + ulit(end) + ") mn_rotate" +
         std::to_string(j) + "(i" + (first ? " - " + ulit(first) : std::string()) + ");\n";
    first = end;
  }
  s += "}\n";
  KernelLaunch k;
  k.name = std::string(backward ? "rope_positions_backward" : "rope_positions") +
           (ctx.load_perm ? "+prologue[permute]" : "") +
           (ctx.store_perm ? "+epilogue[permute]" : "") + (rotations.size() > 1 ? "+stacked" : "");
  k.glsl = std::move(s);
  k.workgroup = {grid.local, 1, 1};
  k.groups = grid.groups;
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  if (const StackedRotation* st = ctx.stacked_rotation) {
    k.bindings.push_back({ArgRef::input(st->input), false});
    k.bindings.push_back({ArgRef::output(1), true});
  }
  Lowering low;
  low.launches.push_back(std::move(k));
  return low;
}

}  // namespace mn::codegen::attention_lowering
