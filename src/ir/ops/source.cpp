// Source ops: graph inputs, trainable parameters and constants. They have no operands; the
// reference evaluator feeds inputs and parameters by name.
#include "ir/op_def.h"
#include "ir/ops/families.h"

namespace mn {

void register_source_ops(OpRegistry& r) {
  auto no_infer = [](const char* name) {
    return [name](const Attrs&, std::span<const TensorType>) -> TensorType {
      throw Error(std::string(name) + " nodes are created by Graph::" + name + "()");
    };
  };
  auto zero_vjp = [](const Node&, std::span<const Tensor>, Tensor, Tensor) {
    return std::vector<Tensor>{};
  };
  r.add({.name = "input",
         .arity = 0,
         .archetype = Archetype::source,
         .differentiable = false,
         .infer = no_infer("input"),
         .summary = "a named graph input, set per step"});
  r.add({.name = "parameter",
         .arity = 0,
         .archetype = Archetype::source,
         .differentiable = true,
         .infer = no_infer("parameter"),
         .vjp = zero_vjp,
         .summary = "a named trainable tensor with an initializer"});
  r.add(
      {.name = "state",
       .arity = 0,
       .archetype = Archetype::source,
       .differentiable = false,
       .infer = no_infer("state"),
       .summary = "a named persistent non-trainable tensor (optimizer state, running statistics)"});
  r.add({.name = "constant",
         .arity = 0,
         .archetype = Archetype::source,
         .differentiable = false,
         .infer = no_infer("constant"),
         .eval =
             [](const Node& n, std::span<const Array* const>) {
               return *n.attrs.as<ConstantAttrs>().value.array;
             },
         .summary = "a constant tensor"});
}

}  // namespace mn
