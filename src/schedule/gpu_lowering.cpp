#include "schedule/gpu_lowering.h"

#include "codegen/kernel.h"
#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "schedule/lowering.h"

namespace mn::schedule {

bool has_gpu_lowering(std::string_view op) {
  if (codegen::find_lowering(op)) return true;
  const OpDef* d = find_op_def(op);
  return d && d->decompose;  // runs as its decomposition
}

Graph lower_for_gpu(const Graph& g) {
  // Each pass expands one level of composites; decompositions may produce other composites.
  constexpr int kMaxPasses = 8;
  bool expanded = true;
  Graph current = copy_graph(g);
  for (int pass = 0; pass < kMaxPasses && expanded; ++pass) {
    expanded = false;
    current = rewrite_graph(current, [&](Graph&, const Node& n, std::span<const Tensor> operands) {
      if (codegen::find_lowering(n.op_name())) return Tensor{};
      if (!n.op->decompose) {
        throw Error("op '" + n.op->name + "' has no GPU kernel and no decomposition");
      }
      expanded = true;
      return n.op->decompose(n, operands);
    });
  }
  if (expanded) throw Error("lower_for_gpu: decompositions did not settle after 8 passes");
  return current;
}

}  // namespace mn::schedule
