#include "plan/in_place.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <queue>

#include "ir/op_def.h"

namespace mn::plan {

namespace {

using schedule::KernelGroup;

// Edges between groups (from must run before to): the data dependencies.
std::vector<std::vector<int>> data_edges(const std::vector<KernelGroup>& groups) {
  std::map<NodeId, int> producer;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (NodeId n : groups[gi].nodes) producer[n] = static_cast<int>(gi);
  }
  std::vector<std::vector<int>> edges(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (NodeId in : groups[gi].inputs) {
      auto it = producer.find(in);
      if (it != producer.end() && it->second != static_cast<int>(gi)) {
        edges[static_cast<size_t>(it->second)].push_back(static_cast<int>(gi));
      }
    }
  }
  return edges;
}

// A topological order that takes the lowest original index among the ready groups, so an
// order that already satisfies the edges comes back unchanged; nullopt on a cycle.
std::optional<std::vector<int>> stable_order(const std::vector<std::vector<int>>& edges) {
  std::vector<int> indegree(edges.size(), 0);
  for (const auto& out : edges) {
    for (int to : out) ++indegree[static_cast<size_t>(to)];
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (size_t i = 0; i < edges.size(); ++i) {
    if (indegree[i] == 0) ready.push(static_cast<int>(i));
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int gi = ready.top();
    ready.pop();
    order.push_back(gi);
    for (int to : edges[static_cast<size_t>(gi)]) {
      if (--indegree[static_cast<size_t>(to)] == 0) ready.push(to);
    }
  }
  if (order.size() != edges.size()) return std::nullopt;
  return order;
}

// The persistent tensor group `gi` could update in place, if its op allows and its result is
// assigned back to its input 0.
std::optional<NodeId> in_place_target(const Graph& g, const KernelGroup& group) {
  if (group.kind != KernelGroup::Kind::single || group.nodes.size() != 1) return std::nullopt;
  const NodeId v = group.nodes.front();
  const Node& node = g.node(v);
  if (!node.op || !node.op->updates_input0_in_place || node.inputs.empty()) return std::nullopt;
  const NodeId target = node.inputs.front();
  // Input 0 only once among the operands: another binding would read it while it is written.
  if (std::count(node.inputs.begin(), node.inputs.end(), target) != 1) return std::nullopt;
  bool assigned_here = false;
  for (const auto& [to, value] : g.assignments()) {
    if (value == target) return std::nullopt;  // another assignment copies the old value
    if (to == target) {
      if (value != v) return std::nullopt;  // assigned something else
      assigned_here = true;
    }
  }
  return assigned_here ? std::optional<NodeId>(target) : std::nullopt;
}

}  // namespace

std::vector<char> plan_in_place(const Graph& g, std::vector<KernelGroup>& groups) {
  std::vector<std::vector<int>> edges = data_edges(groups);
  std::vector<char> in_place(groups.size(), 0);
  bool added = false;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const std::optional<NodeId> target = in_place_target(g, groups[gi]);
    if (!target) continue;
    std::vector<std::vector<int>> trial = edges;
    for (size_t r = 0; r < groups.size(); ++r) {
      const auto& ins = groups[r].inputs;
      if (r != gi && std::find(ins.begin(), ins.end(), *target) != ins.end()) {
        trial[r].push_back(static_cast<int>(gi));
      }
    }
    if (!stable_order(trial)) continue;  // a reader of the old value needs the new one
    edges = std::move(trial);
    in_place[gi] = 1;
    added = true;
  }
  if (!added) return in_place;
  const std::vector<int> order = *stable_order(edges);
  std::vector<KernelGroup> sorted;
  std::vector<char> flags;
  for (int gi : order) {
    sorted.push_back(std::move(groups[static_cast<size_t>(gi)]));
    flags.push_back(in_place[static_cast<size_t>(gi)]);
  }
  groups = std::move(sorted);
  return flags;
}

}  // namespace mn::plan
