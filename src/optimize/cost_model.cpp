// Default device parameters (CostParams in optimize.h) are an H200-class GPU as this project's
// kernels measure on one: pointwise kernels stream ~3.5 TB/s of HBM, the f32 GEMM reaches
// ~30 TFLOP/s, and a Vulkan dispatch inside one submission costs a few microseconds (barrier and
// launch). lavapipe is orders of magnitude slower on every term, but extraction only compares
// equivalent forms, so the relative order is what matters.
#include "optimize/cost_model.h"

#include <cmath>
#include <string_view>

#include "codegen/kernel.h"
#include "ir/ops/matmul.h"

namespace mn::optimize {

namespace {

// Forms that are free: metadata-only views and sources. A tiny positive cost keeps extraction
// well defined (zero-cost cycles cannot be told apart).
constexpr double free_seconds = 1e-12;
// A composite without a GPU kernel is lowered to its decomposition: a few kernels' worth.
constexpr double composite_penalty = 4.0;

bool is_free_view(std::string_view op) {
  return op == "reshape" || op == "squeeze" || op == "unsqueeze" || op == "stop_gradient";
}

// FLOPs per output element of pointwise ops: transcendental functions cost several.
double pointwise_flops(std::string_view op) {
  if (op == "div") return 4;
  if (op == "exp" || op == "log" || op == "sqrt" || op == "rsqrt" || op == "sin" || op == "cos" ||
      op == "tanh" || op == "sigmoid" || op == "erf" || op == "pow" || op == "silu" ||
      op == "gelu" || op == "softplus")
    return 8;
  return 1;
}

double bytes_of(const TensorType& t) {
  return static_cast<double>(t.numel()) * static_cast<double>(dtype_size(t.dtype));
}

}  // namespace

CostModel::CostModel(const CostParams& params) : params_(params) {}

NodeEstimate CostModel::estimate(const OpDef& op, const Attrs& attrs,
                                 std::span<const TensorType> inputs,
                                 const TensorType& output) const {
  NodeEstimate e;
  if (op.archetype == Archetype::source || is_free_view(op.name)) return e;
  const double out_elems = static_cast<double>(output.numel());
  e.bytes = bytes_of(output);
  for (const TensorType& t : inputs) e.bytes += bytes_of(t);
  switch (op.archetype) {
    case Archetype::pointwise:
      e.flops = out_elems * pointwise_flops(op.name);
      break;
    case Archetype::view:
      // Copies (permute, broadcast_to, slice, concat, pad...): fused into their consumers like
      // pointwise ops, no arithmetic.
      break;
    case Archetype::reduction: {
      double in_elems = 0;
      for (const TensorType& t : inputs) in_elems = std::max(in_elems, double(t.numel()));
      e.flops = in_elems * (op.decompose ? 4 : 1);
      e.dispatches = 1;
      break;
    }
    case Archetype::matmul: {
      double k = 1;
      if (!inputs.empty() && inputs[0].rank() >= 1) {
        const auto& s = inputs[0].shape;
        const bool ta = attrs.is<MatmulAttrs>() && attrs.as<MatmulAttrs>().transpose_a;
        k = static_cast<double>(s.size() >= 2 && ta ? s[s.size() - 2] : s.back());
      }
      e.flops = 2 * out_elems * k;
      e.dispatches = 1;
      break;
    }
    case Archetype::conv: {
      // Implicit GEMM: 2·sqrt(|x|·|w|·|out|) is exact for a plain GEMM; a k×k window multiplies
      // the reduction by k, taken as 3 (the common kernel size).
      double prod = out_elems;
      for (const TensorType& t : inputs) prod *= static_cast<double>(t.numel());
      e.flops = 2 * 3 * std::sqrt(prod);
      e.dispatches = 1;
      break;
    }
    case Archetype::attention: {
      // q [..., Lq, D], k [..., Lk, D]: QKᵀ and PV, 2·2·|q|·Lk. The training ops recompute
      // QKᵀ: the log-sum-exp nothing more, dV adds PᵀdO, dQ and dK add dO Vᵀ and one product
      // with dS.
      double lk = inputs.size() >= 2 && inputs[1].rank() >= 2
                      ? static_cast<double>(inputs[1].shape[inputs[1].shape.size() - 2])
                      : 1;
      const double products = op.name == "attention_lse"      ? 1
                              : op.name == "attention_grad_v" ? 2
                              : op.name == "attention_grad_q" || op.name == "attention_grad_k"
                                  ? 3
                                  : 2;
      e.flops = 2 * products * (inputs.empty() ? 0 : static_cast<double>(inputs[0].numel())) * lk;
      e.dispatches = 1;
      break;
    }
    default:  // gather/scatter, windows
      e.flops = out_elems;
      e.dispatches = 1;
      break;
  }
  if (op.decompose && !codegen::find_lowering(op.name)) {
    e.bytes *= composite_penalty;
    e.flops *= composite_penalty;
    e.dispatches = std::max(e.dispatches, 1.0) * composite_penalty;
  }
  return e;
}

double CostModel::seconds(const OpDef&, const NodeEstimate& e) const {
  return free_seconds + e.bytes / params_.bytes_per_second + e.flops / params_.flops_per_second +
         e.dispatches * params_.seconds_per_dispatch;
}

GraphEstimate CostModel::estimate(const Graph& g) const {
  std::vector<uint8_t> live(g.size(), 0);
  std::vector<NodeId> stack;
  for (const auto& [name, id] : g.outputs()) stack.push_back(id);
  for (const auto& [target, value] : g.assignments()) stack.push_back(value);
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (live[static_cast<size_t>(id)]) continue;
    live[static_cast<size_t>(id)] = 1;
    for (NodeId in : g.node(id).inputs) stack.push_back(in);
  }
  GraphEstimate total;
  std::vector<TensorType> types;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!live[i]) continue;
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op->archetype == Archetype::source) continue;
    types.clear();
    for (NodeId in : n.inputs) types.push_back(g.node(in).type);
    const NodeEstimate e = estimate(*n.op, n.attrs, types, n.type);
    ++total.nodes;
    total.bytes += e.bytes;
    total.flops += e.flops;
    total.seconds += seconds(*n.op, e);
  }
  return total;
}

egraph::NodeCost CostModel::node_cost(const TensorEGraph& teg) const {
  const egraph::EGraph& eg = teg.egraph();
  auto table = std::make_shared<std::vector<double>>(eg.num_ids(), 0.0);
  std::vector<TensorType> types;
  auto price = [this, &teg, &types](const egraph::ENode& node, egraph::Id cls) {
    types.clear();
    for (egraph::Id c : node.children()) types.push_back(teg.type(c));
    const OpDef& def = teg.op_def(node.op());
    return seconds(def, estimate(def, teg.attrs(node.attr()), types, teg.type(cls)));
  };
  for (egraph::Id c : eg.classes()) {
    for (egraph::Id n : eg.class_nodes(c)) (*table)[n] = price(eg.node(n), c);
  }
  // The extractors pass the e-graph's own nodes, so the node's id is its offset.
  return [table, &teg, this](const egraph::EGraph& g, const egraph::ENode& node) {
    const auto offset = &node - &g.node(0);
    if (offset >= 0 && static_cast<size_t>(offset) < table->size() &&
        &g.node(static_cast<egraph::Id>(offset)) == &node) {
      return (*table)[static_cast<size_t>(offset)];
    }
    std::vector<TensorType> in;
    for (egraph::Id c : node.children()) in.push_back(teg.type(c));
    const OpDef& def = teg.op_def(node.op());
    return seconds(def, estimate(def, teg.attrs(node.attr()), in, teg.type(g.lookup(node))));
  };
}

}  // namespace mn::optimize
