#include "ir/op_def.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "ir/ops/families.h"

namespace mn {

const char* archetype_name(Archetype a) {
  switch (a) {
    case Archetype::source:
      return "source";
    case Archetype::view:
      return "view";
    case Archetype::pointwise:
      return "pointwise";
    case Archetype::reduction:
      return "reduction";
    case Archetype::matmul:
      return "matmul";
    case Archetype::conv:
      return "conv";
    case Archetype::attention:
      return "attention";
    case Archetype::gather_scatter:
      return "gather_scatter";
    case Archetype::window:
      return "window";
  }
  return "?";
}

void OpRegistry::add(OpDef def) {
  for (const auto& d : defs) {
    if (d->name == def.name) throw Error("op '" + def.name + "' registered twice");
  }
  if (def.differentiable && !def.vjp) {
    throw Error("op '" + def.name + "' is differentiable but has no vjp");
  }
  defs.push_back(std::make_unique<OpDef>(std::move(def)));
}

namespace {

struct Table {
  OpRegistry registry;
  std::map<std::string, const OpDef*, std::less<>> by_name;
  std::vector<const OpDef*> ordered;
};

const Table& table() {
  static const Table t = [] {
    Table t;
    register_source_ops(t.registry);
    register_elementwise_ops(t.registry);
    register_reduce_ops(t.registry);
    register_matmul_ops(t.registry);
    register_shape_ops(t.registry);
    register_nn_ops(t.registry);
    register_conv_ops(t.registry);
    register_pool_ops(t.registry);
    register_attention_ops(t.registry);
    register_attention_training_ops(t.registry);
    register_attention_position_ops(t.registry);
    register_sampling_ops(t.registry);
    register_loss_ops(t.registry);
    register_cache_ops(t.registry);
    for (const auto& d : t.registry.defs) {
      t.by_name.emplace(d->name, d.get());
      t.ordered.push_back(d.get());
    }
    return t;
  }();
  return t;
}

}  // namespace

const OpDef* find_op_def(std::string_view name) {
  const auto& t = table();
  auto it = t.by_name.find(name);
  return it == t.by_name.end() ? nullptr : it->second;
}

const OpDef& op_def(std::string_view name) {
  if (const OpDef* d = find_op_def(name)) return *d;
  throw Error("unknown op '" + std::string(name) + "'");
}

const std::vector<const OpDef*>& all_op_defs() { return table().ordered; }

void shape_fail(std::string_view op, std::span<const TensorType> inputs,
                const std::string& expected) {
  std::string msg = std::string(op) + ": ";
  msg += expected;
  msg += " (got inputs";
  for (size_t i = 0; i < inputs.size(); ++i) msg += (i ? ", " : " ") + inputs[i].str();
  if (inputs.empty()) msg += " none";
  msg += ")";
  throw ShapeError(msg);
}

}  // namespace mn
