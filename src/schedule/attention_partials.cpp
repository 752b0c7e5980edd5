#include "schedule/attention_partials.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "codegen/lower_attention.h"
#include "codegen/lower_matmul.h"

namespace mn::schedule {

namespace {

std::vector<TensorType> input_types(const Graph& g, const KernelGroup& k, size_t count) {
  std::vector<TensorType> types;
  for (size_t i = 0; i < count && i < k.inputs.size(); ++i)
    types.push_back(g.node(k.inputs[i]).type);
  return types;
}

// The partials' layout where group `a` is a cached_attention whose kernel stores them.
std::optional<codegen::attention_lowering::PartialsLayout> partials_layout(
    const Graph& g, const KernelGroup& a, const codegen::DeviceTraits& device) {
  if (a.kind != KernelGroup::Kind::single || a.attention_partials || a.outputs.size() != 1 ||
      !a.stored_permuted.empty() || a.permuted_twin.output >= 0) {
    return std::nullopt;
  }
  const Node& n = g.node(a.nodes.front());
  if (n.op_name() != "cached_attention" || n.type.dtype != DType::f32) return std::nullopt;
  const std::vector<TensorType> types = input_types(g, a, a.inputs.size());
  const codegen::LowerContext ctx{n, types, device};
  return codegen::attention_lowering::partials_of(ctx);
}

// Whether group `m` is a GEMV without extras reading `v` as its vector of `elements` f32
// elements, and nowhere else.
bool gemv_reading(const Graph& g, const KernelGroup& m, NodeId v, uint64_t elements,
                  const codegen::DeviceTraits& device) {
  if (m.kind != KernelGroup::Kind::single && m.kind != KernelGroup::Kind::matmul_epilogue) {
    return false;
  }
  if (!without_extras(m) || !m.stored_permuted.empty() || m.permuted_twin.output >= 0) return false;
  const Node& mm = g.node(m.nodes.front());
  if (mm.op_name() != "matmul" || mm.inputs.at(0) != v || mm.inputs.at(1) == v) return false;
  if (std::count(m.inputs.begin(), m.inputs.end(), v) != 1 || m.inputs.at(0) != v) return false;
  const TensorType& x = g.node(v).type;
  if (x.dtype != DType::f32 || static_cast<uint64_t>(x.numel()) != elements) return false;
  const std::vector<TensorType> types = input_types(g, m, mm.inputs.size());
  const codegen::LowerContext ctx{mm, types, device};
  return codegen::gemv_takes_extras(ctx) &&
         static_cast<uint64_t>(codegen::geometry(ctx).k) == elements;
}

}  // namespace

void read_attention_partials(const Graph& g, std::vector<KernelGroup>& groups,
                             const codegen::DeviceTraits& device) {
  if (!device.attention_partials_in_products) return;
  const std::set<NodeId> kept = kept_values(g);
  std::map<NodeId, std::vector<size_t>> readers;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::set<NodeId> read(groups[i].inputs.begin(), groups[i].inputs.end());
    for (NodeId v : read) readers[v].push_back(i);
  }
  // The only group reading `v`, or -1 (none, several, or `v` kept).
  auto only_reader = [&](NodeId v) -> int {
    const auto it = readers.find(v);
    if (kept.count(v) || it == readers.end() || it->second.size() != 1) return -1;
    return static_cast<int>(it->second.front());
  };
  for (KernelGroup& a : groups) {
    const auto layout = partials_layout(g, a, device);
    if (!layout) continue;
    // Through reshapes (the output's memory as it is) to the one product reading it.
    NodeId v = a.outputs.front();
    int r = only_reader(v);
    while (r >= 0 && groups[static_cast<size_t>(r)].kind == KernelGroup::Kind::single &&
           g.node(groups[static_cast<size_t>(r)].nodes.front()).op_name() == "reshape") {
      v = groups[static_cast<size_t>(r)].outputs.front();
      r = only_reader(v);
    }
    if (r < 0) continue;
    KernelGroup& m = groups[static_cast<size_t>(r)];
    if (!gemv_reading(g, m, v, layout->rows * layout->dv, device)) continue;
    a.attention_partials = true;
    m.gemv.combine_splits = static_cast<int64_t>(layout->splits);
    m.gemv.combine_dv = static_cast<int64_t>(layout->dv);
  }
}

}  // namespace mn::schedule
