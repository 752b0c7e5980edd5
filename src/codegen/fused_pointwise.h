#pragma once
// Kernels for fused pointwise work: several elementwise ops evaluated in registers, one thread
// per element of a segment's domain, each external operand loaded once through its broadcast
// offset, and several outputs stored by one launch. A launch may hold several independent
// segments (horizontal fusion, e.g. the optimizer update of every parameter): their index
// ranges are concatenated and each thread runs the segment its index falls in.
//
// The per-op expressions are those of the single-op pointwise lowering (lower_pointwise.cpp),
// so fused and unfused kernels compute the same f32 values.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"

namespace mn::codegen {

// The f32 GLSL expression of a pointwise op over operand values named a, b, c, or nullopt when
// the op has no such form (not a pointwise op of lower_pointwise).
std::optional<std::string> pointwise_expression(const Node& node);
// Functions those expressions may call (mn_tanh, mn_erf, ...), to place once before main().
const char* pointwise_math_library();

// Whether `node` can be evaluated inside a fused kernel: a pointwise op with an f32 expression
// whose operands and result are f32, or a cast between f32, f16 and bf16 (its 16-bit result
// rounded in registers exactly as a store would). Integer values and other ops on 16-bit values
// keep their single kernels, which round and convert exactly as the reference does.
bool fusable_pointwise(const Node& node, std::span<const TensorType> inputs);

// An operand of a step: an earlier step of the same segment, external input k, or a literal
// (a scalar constant baked into the source: no binding, no load).
struct FusedOperand {
  int step = -1;
  int input = -1;
  std::string literal;
  static FusedOperand of_step(int s) { return {s, -1, {}}; }
  static FusedOperand of_input(int k) { return {-1, k, {}}; }
  static FusedOperand of_literal(std::string v) { return {-1, -1, std::move(v)}; }
};

// One value computed by a fused kernel: `node`'s op applied to its operands.
struct FusedStep {
  const Node* node = nullptr;
  std::vector<FusedOperand> operands;
};

// A domain of threads: every step is evaluated at the coordinates of one element of `domain`
// (a step of smaller shape is read through broadcasting, as its consumer would read it).
struct FusedSegment {
  Shape domain;
  std::vector<FusedStep> steps;
  std::vector<std::pair<int, int>> stores;  // (kernel output, step); outputs have `domain`'s shape
};

struct FusedPointwise {
  std::string name;                 // kernel name for profiles
  std::vector<TensorType> inputs;   // binding i = ArgRef::input(i)
  std::vector<TensorType> outputs;  // binding inputs.size() + j = ArgRef::output(j)
  std::vector<FusedSegment> segments;
  // Per output: the input whose buffer it is stored into (-1: its own binding). That input is
  // bound read-write, once, and read by its segment only at the element stored (the planner's
  // in-place updates, plan/in_place.h); empty: none.
  std::vector<int> in_place;
};

Lowering lower_fused_pointwise(const FusedPointwise& f, const DeviceTraits& device);

// GLSL statements evaluating `segment` at element `index` (a uint expression) of its domain,
// leaving step s in `float <prefix>s`. Input k is read with `input_exprs[k]`, a format whose
// "$" is replaced by the element offset (e.g. "in3_ld($)"), or taken as it is when it has no
// "$" (a value already in a register, such as a matmul's accumulator).
std::string fused_statements(const FusedSegment& segment, std::span<const TensorType> inputs,
                             std::span<const std::string> input_exprs, const std::string& index,
                             const std::string& prefix);

}  // namespace mn::codegen
