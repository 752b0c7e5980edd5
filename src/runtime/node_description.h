#pragma once
// How runtime errors name a node of a compiled step: its id, name or output name, op and type.
#include <string>

#include "plan/step_plan.h"

namespace mn::runtime {

// "node 12 'w' (output 'loss') (op take, f32[4, 2])".
std::string describe_node(const plan::StepPlan& plan, NodeId id);

// Where a node's operand comes from: "input 'input_ids'", "parameter 'w'", "state 'cache'",
// "a constant", or "node 7 (op add)" for a computed value.
std::string describe_operand(const plan::StepPlan& plan, NodeId id);

}  // namespace mn::runtime
