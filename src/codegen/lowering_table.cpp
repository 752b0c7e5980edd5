#include <map>
#include <memory>

#include <meganeura/error.h>

#include "codegen/kernel.h"
#include "codegen/lower_families.h"

namespace mn::codegen {

void LoweringRegistry::add(std::string op, LowerFn fn) {
  for (const auto& [name, f] : entries) {
    if (name == op) throw Error("lowering for '" + op + "' registered twice");
  }
  entries.emplace_back(std::move(op), std::move(fn));
}

namespace {
const std::map<std::string, LowerFn, std::less<>>& table() {
  static const auto t = [] {
    LoweringRegistry r;
    register_pointwise_lowerings(r);
    register_reduce_lowerings(r);
    register_matmul_lowerings(r);
    register_shape_lowerings(r);
    register_nn_lowerings(r);
    register_conv_lowerings(r);
    register_pool_lowerings(r);
    register_attention_lowerings(r);
    register_attention_training_lowerings(r);
    register_loss_lowerings(r);
    register_cache_lowerings(r);
    register_sampling_lowerings(r);
    std::map<std::string, LowerFn, std::less<>> m;
    for (auto& [name, fn] : r.entries) m.emplace(name, std::move(fn));
    return m;
  }();
  return t;
}
}  // namespace

const LowerFn* find_lowering(std::string_view op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

}  // namespace mn::codegen
