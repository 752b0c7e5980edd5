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
using schedule::KernelSegment;

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

// The persistent tensor that `value` is assigned to, when that tensor is assigned nothing else
// and its old value is not itself assigned anywhere (that copy would read it after the write).
std::optional<NodeId> sole_assignment_target(const Graph& g, NodeId value) {
  std::optional<NodeId> target;
  for (const auto& [to, v] : g.assignments()) {
    if (v == value) target = to;
  }
  if (!target) return std::nullopt;
  for (const auto& [to, v] : g.assignments()) {
    if (v == *target) return std::nullopt;
    if (to == *target && v != value) return std::nullopt;
  }
  return target;
}

struct Candidate {
  int output = 0;  // index among the group's outputs
  int input = 0;   // index among its inputs: the buffer written
};

// A single group of an op that may update its input 0 in place, assigned back to it.
std::optional<Candidate> single_candidate(const Graph& g, const KernelGroup& group) {
  if (group.nodes.size() != 1) return std::nullopt;
  const NodeId v = group.nodes.front();
  const Node& node = g.node(v);
  if (!node.op || !node.op->updates_input0_in_place || node.inputs.empty()) return std::nullopt;
  const NodeId target = node.inputs.front();
  // Input 0 only once among the operands: another binding would read it while it is written.
  if (std::count(node.inputs.begin(), node.inputs.end(), target) != 1) return std::nullopt;
  if (sole_assignment_target(g, v) != target) return std::nullopt;
  return Candidate{0, 0};
}

// The outputs of a pointwise group that may overwrite the state they are assigned to: the
// state is one of the group's inputs, of the output's type, read only within the output's
// segment and there over the segment's whole domain (so at the element being computed).
std::vector<Candidate> pointwise_candidates(const Graph& g, const KernelGroup& group) {
  std::vector<Candidate> found;
  for (size_t j = 0; j < group.outputs.size(); ++j) {
    const NodeId v = group.outputs[j];
    const std::optional<NodeId> target = sole_assignment_target(g, v);
    if (!target) continue;
    const auto in = std::find(group.inputs.begin(), group.inputs.end(), *target);
    if (in == group.inputs.end() || g.node(*target).type != g.node(v).type) continue;
    const auto seg = std::find_if(group.segments.begin(), group.segments.end(), [&](const auto& s) {
      return std::find(s.outputs.begin(), s.outputs.end(), v) != s.outputs.end();
    });
    if (seg == group.segments.end() || seg->domain != g.node(v).type.shape) continue;
    bool read_elsewhere = false;
    for (const KernelSegment& s : group.segments) {
      if (&s == &*seg) continue;
      for (NodeId n : s.nodes) {
        const auto& ins = g.node(n).inputs;
        read_elsewhere = read_elsewhere || std::find(ins.begin(), ins.end(), *target) != ins.end();
      }
    }
    if (read_elsewhere) continue;
    found.push_back({static_cast<int>(j), static_cast<int>(in - group.inputs.begin())});
  }
  return found;
}

std::vector<Candidate> candidates(const Graph& g, const KernelGroup& group) {
  switch (group.kind) {
    case KernelGroup::Kind::single:
      if (auto c = single_candidate(g, group)) return {*c};
      return {};
    case KernelGroup::Kind::pointwise:
      return pointwise_candidates(g, group);
    default:
      return {};
  }
}

}  // namespace

std::vector<std::vector<int>> plan_in_place(const Graph& g, std::vector<KernelGroup>& groups) {
  std::vector<std::vector<int>> edges = data_edges(groups);
  std::vector<std::vector<int>> in_place(groups.size());
  bool added = false;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    in_place[gi].assign(groups[gi].outputs.size(), -1);
    for (const Candidate& c : candidates(g, groups[gi])) {
      const NodeId target = groups[gi].inputs[static_cast<size_t>(c.input)];
      std::vector<std::vector<int>> trial = edges;
      for (size_t r = 0; r < groups.size(); ++r) {
        const auto& ins = groups[r].inputs;
        if (r != gi && std::find(ins.begin(), ins.end(), target) != ins.end()) {
          trial[r].push_back(static_cast<int>(gi));
        }
      }
      if (!stable_order(trial)) continue;  // a reader of the old value needs the new one
      edges = std::move(trial);
      in_place[gi][static_cast<size_t>(c.output)] = c.input;
      added = true;
    }
  }
  if (!added) return in_place;
  const std::vector<int> order = *stable_order(edges);
  std::vector<KernelGroup> sorted;
  std::vector<std::vector<int>> outputs;
  for (int gi : order) {
    sorted.push_back(std::move(groups[static_cast<size_t>(gi)]));
    outputs.push_back(std::move(in_place[static_cast<size_t>(gi)]));
  }
  groups = std::move(sorted);
  return outputs;
}

}  // namespace mn::plan
