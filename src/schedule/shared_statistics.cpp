#include "schedule/shared_statistics.h"

#include <map>
#include <vector>

#include <meganeura/ops.h>

#include "ir/graph_rewrite.h"
#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/reduce.h"

namespace mn::schedule {

namespace {

// A result this many times smaller than its input is worth keeping instead of the input.
constexpr int64_t kShrink = 16;

bool small_statistic(const Graph& g, const Node& n) {
  if (!n.op || n.op->archetype != Archetype::reduction || n.inputs.size() != 1) return false;
  return n.type.numel() * kShrink <= g.node(n.inputs[0]).type.numel();
}

// Elements each result of a reduction over `axes` (normalized) of `shape` sums.
int64_t reduced_count(const Shape& shape, const std::vector<int64_t>& axes) {
  int64_t count = 1;
  for (int64_t a : axes) count *= shape[static_cast<size_t>(a)];
  return count;
}

struct Earlier {
  NodeId node = -1;
  Tensor value;
};

}  // namespace

std::optional<Graph> share_statistics(const Graph& lowered) {
  // The first statistic of each (op, input); later ones compare attributes with it.
  std::multimap<std::pair<std::string, NodeId>, Earlier> seen;
  bool changed = false;
  size_t cursor = 0;  // the callback sees the non-leaf nodes in order
  Graph out = rewrite_graph(lowered, [&](Graph& g, const Node& node,
                                         std::span<const Tensor> operands) -> Tensor {
    while (&lowered.node(static_cast<NodeId>(cursor)) != &node) ++cursor;
    if (!small_statistic(lowered, node)) return {};
    const NodeId input = node.inputs[0];
    const std::string op(node.op_name());
    auto [lo, hi] = seen.equal_range({op, input});
    for (auto it = lo; it != hi; ++it) {
      const Node& first = lowered.node(it->second.node);
      if (first.attrs == node.attrs) {
        changed = true;
        return it->second.value;
      }
      if (op != "variance") continue;
      const auto& a = first.attrs.as<VarianceAttrs>();
      const auto& b = node.attrs.as<VarianceAttrs>();
      // Axes as the op reads them: negative ones counted from the end, none meaning all.
      const Shape& shape = lowered.node(input).type.shape;
      const int rank = static_cast<int>(shape.size());
      const std::vector<int64_t> axes = ops::normalize_axes(a.axes, rank, op);
      if (axes != ops::normalize_axes(b.axes, rank, op)) continue;
      const int64_t n = reduced_count(shape, axes);
      if (n - a.correction <= 0 || n - b.correction <= 0) continue;
      changed = true;
      Tensor v = it->second.value;
      if (v.type().shape != node.type.shape) v = reshape(v, node.type.shape);
      if (a.correction == b.correction) return v;
      return v * (static_cast<double>(n - a.correction) / static_cast<double>(n - b.correction));
    }
    std::vector<NodeId> ids;
    for (const Tensor& o : operands) ids.push_back(o.id());
    Tensor t = g.apply(*node.op, node.attrs, ids);
    seen.emplace(std::pair{op, input}, Earlier{static_cast<NodeId>(cursor), t});
    return t;
  });
  if (!changed) return std::nullopt;
  return out;
}

}  // namespace mn::schedule
