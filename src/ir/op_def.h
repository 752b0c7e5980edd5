#pragma once
// The op table entry: everything about an op is declared here once, and every stage (reference,
// autodiff, optimizer rules, scheduling, conformance tests, `mn ops`) derives what it needs.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/graph.h>

namespace mn {

// How an op lowers to a GPU kernel (DESIGN.md, "Kernel archetypes").
enum class Archetype : uint8_t {
  source,          // input, parameter, constant: no kernel
  view,            // reshape-like: no kernel when the layout allows, else a copy
  pointwise,       // one thread per output element; fuses into pointwise DAGs
  reduction,       // reduction along axes with prologue/epilogue
  matmul,          // tiled GEMM
  conv,            // implicit GEMM
  attention,       // flash-style attention
  gather_scatter,  // indexed reads / atomic accumulation
  window,          // pooling and resampling windows
};
const char* archetype_name(Archetype a);

// Inputs of the reference evaluation: the node (attributes and output type) and its operands.
using InferFn = std::function<TensorType(const Attrs&, std::span<const TensorType> inputs)>;
using EvalFn = std::function<Array(const Node& node, std::span<const Array* const> inputs)>;
// Gradients of the node's inputs given the cotangent of its output, written as graph ops in the
// same graph. One entry per input; an invalid Tensor means "no gradient flows to this input".
using VjpFn = std::function<std::vector<Tensor>(const Node& node, std::span<const Tensor> inputs,
                                                Tensor output, Tensor cotangent)>;
// The same function written with primitive ops (for composites), in the same graph.
using DecomposeFn = std::function<Tensor(const Node& node, std::span<const Tensor> inputs)>;

// A test case for the conformance harness and gradcheck: operand types and attributes, plus
// how to fill the operands (integer operands need valid index ranges, log needs positives...).
struct OpSample {
  std::string label;  // e.g. "broadcast_row"
  std::vector<TensorType> inputs;
  Attrs attrs;
  // Per input: {low, high} of uniform random fill; integer inputs draw integers in [low, high).
  std::vector<std::pair<double, double>> ranges;
  // Inputs that gradcheck must not perturb (indices, masks, running statistics).
  std::vector<bool> no_grad;
  // Finite differences are unreliable near kinks (relu at 0, max ties); samples say how far
  // inputs must stay from them by choosing ranges, and may loosen the gradcheck tolerance.
  double grad_tolerance = 1e-6;
};
using SamplesFn = std::function<std::vector<OpSample>()>;

struct OpDef {
  std::string name;
  int arity = 0;  // -1: variadic (at least one input)
  Archetype archetype = Archetype::pointwise;
  bool differentiable = true;  // false: no gradient flows through (comparisons, argmax...)
  InferFn infer;
  EvalFn eval;
  VjpFn vjp;              // required when differentiable
  DecomposeFn decompose;  // composites only
  SamplesFn samples;      // conformance/gradcheck cases; required for every public op
  std::string summary;    // one line for `mn ops`
  bool internal = false;  // helper ops produced by vjps/decompositions, not in the public API
  // The result is input 0 with some elements replaced (cache_write), and the GPU lowering can
  // write those elements into input 0's own buffer (LowerContext::in_place). The planner does so
  // when the result is assigned back to the state that is input 0 and no other kernel reads
  // the old value afterwards (plan/in_place.h); else the lowering copies input 0 first.
  bool updates_input0_in_place = false;
};

// The table. Lookups throw mn::Error naming an unknown op.
const OpDef& op_def(std::string_view name);
const OpDef* find_op_def(std::string_view name);
const std::vector<const OpDef*>& all_op_defs();

// Families register their ops here (one function per src/ir/ops/*.cpp).
class OpRegistry {
 public:
  void add(OpDef def);
  std::vector<std::unique_ptr<OpDef>> defs;
};

// Shape inference helpers that report the op by name.
[[noreturn]] void shape_fail(std::string_view op, std::span<const TensorType> inputs,
                             const std::string& expected);

// The ops that make a graph's values rather than compute them: inputs, parameters, states and
// constants.
inline bool is_source_op(std::string_view op) {
  return op == "input" || op == "parameter" || op == "state" || op == "constant";
}

}  // namespace mn
