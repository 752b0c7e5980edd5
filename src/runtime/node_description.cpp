#include "runtime/node_description.h"

namespace mn::runtime {

std::string describe_node(const plan::StepPlan& plan, NodeId id) {
  const Node& n = plan.graph.node(id);
  std::string s = "node " + std::to_string(id);
  if (!n.name.empty()) s += " '" + n.name + "'";
  for (const auto& [name, out] : plan.outputs) {
    if (out == id) s += " (output '" + name + "')";
  }
  return s + " (op " + std::string(n.op_name()) + ", " + n.type.str() + ")";
}

std::string describe_operand(const plan::StepPlan& plan, NodeId id) {
  const Node& n = plan.graph.node(id);
  const std::string op(n.op_name());
  if (op == "input" || op == "parameter" || op == "state") return op + " '" + n.name + "'";
  if (op == "constant") return "a constant";
  return "node " + std::to_string(id) + " (op " + op + ")";
}

}  // namespace mn::runtime
