#include "schedule/row_tails.h"

#include <algorithm>
#include <set>

#include "codegen/fused_reduce.h"

namespace mn::schedule {

namespace {

struct Groups {
  const Graph& g;
  std::vector<KernelGroup>& list;
  std::vector<int> producer, owner;  // per node: the group storing it, the group computing it
  std::vector<char> dropped;

  Groups(const Graph& graph, std::vector<KernelGroup>& l)
      : g(graph),
        list(l),
        producer(graph.size(), -1),
        owner(graph.size(), -1),
        dropped(l.size(), 0) {
    for (size_t i = 0; i < list.size(); ++i) claim(static_cast<int>(i));
  }
  void claim(int i) {
    for (NodeId o : list[static_cast<size_t>(i)].outputs) producer[static_cast<size_t>(o)] = i;
    for (NodeId v : list[static_cast<size_t>(i)].nodes) owner[static_cast<size_t>(v)] = i;
  }
};

// A reduction kernel of its own as a reduction group without prologue nor epilogue.
KernelGroup as_reduction_group(const Graph& g, const KernelGroup& k) {
  if (k.kind != KernelGroup::Kind::single || k.nodes.size() != 1 || k.outputs.size() != 1 ||
      k.inputs.size() != 1) {
    return k;
  }
  const NodeId r = k.nodes.front();
  const Node& red = g.node(r);
  const TensorType& operand = g.node(k.inputs.front()).type;
  if (red.inputs.size() != 1 || !codegen::reduce_accepts_fusion(red, std::vector{operand}))
    return k;
  KernelGroup group = k;
  group.kind = KernelGroup::Kind::reduction;
  group.anchor = r;
  group.segments = {KernelSegment{operand.shape, {}, {}}, KernelSegment{red.type.shape, {}, {}}};
  return group;
}

// The reduction group's operand, when the group can take a row tail: its reduced value's type
// must then be the operand's with the last axis 1.
std::optional<TensorType> tail_operand(const Graph& g, const KernelGroup& r,
                                       const codegen::DeviceTraits& device) {
  if (r.kind != KernelGroup::Kind::reduction || r.segments.size() != 2 || r.outputs.size() != 1) {
    return std::nullopt;
  }
  const Node& red = g.node(r.anchor);
  const TensorType operand = g.node(red.inputs.front()).type;
  if (!codegen::reduce_takes_row_tail(red, std::vector<TensorType>{operand}, device)) {
    return std::nullopt;
  }
  Shape rows = operand.shape;
  rows.back() = 1;
  const TensorType& value = g.node(r.outputs.front()).type;
  if (value.dtype != DType::f32 || value.shape != rows) return std::nullopt;
  return operand;
}

// The segment of pointwise group `p` that reads `value` over `domain`, or -1.
int reading_segment(const Graph& g, const KernelGroup& p, NodeId value, const Shape& domain) {
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const KernelSegment& seg = p.segments[s];
    if (seg.domain != domain) continue;
    for (NodeId v : seg.nodes) {
      const auto& in = g.node(v).inputs;
      if (std::find(in.begin(), in.end(), value) != in.end()) return static_cast<int>(s);
    }
  }
  return -1;
}

// The values a set of segments reads from outside them, in the order of `order`.
std::vector<NodeId> external_inputs(const Graph& g, std::span<const KernelSegment> segments,
                                    const std::vector<NodeId>& order) {
  std::set<NodeId> inside, read;
  for (const KernelSegment& seg : segments) inside.insert(seg.nodes.begin(), seg.nodes.end());
  for (const KernelSegment& seg : segments) {
    for (NodeId v : seg.nodes) {
      for (NodeId in : g.node(v).inputs) {
        if (!inside.count(in)) read.insert(in);
      }
    }
  }
  std::vector<NodeId> inputs;
  for (NodeId in : order) {
    if (read.count(in)) inputs.push_back(in);
  }
  return inputs;
}

}  // namespace

void fuse_row_tails(const Graph& g, std::vector<KernelGroup>& list,
                    const codegen::DeviceTraits& device, uint32_t max_bindings) {
  Groups groups(g, list);
  const std::vector<char> needed = needed_nodes(g);
  const std::vector<std::vector<NodeId>> consumers = needed_consumers(g, needed);
  const std::vector<char> forward = forward_nodes(g);
  std::set<NodeId> assigned;
  for (const auto& [target, value] : g.assignments()) assigned.insert(value);

  for (size_t i = 0; i < list.size(); ++i) {
    if (groups.dropped[i]) continue;
    const KernelGroup reduction = as_reduction_group(g, list[i]);
    const std::optional<TensorType> operand = tail_operand(g, reduction, device);
    if (!operand) continue;
    const NodeId value = list[i].outputs.front();
    const bool pass = forward[static_cast<size_t>(reduction.anchor)] != 0;
    // The reduction's readers in later pointwise kernels, first come first.
    std::set<int> candidates;
    for (NodeId c : consumers[static_cast<size_t>(value)]) {
      const int j = groups.owner[static_cast<size_t>(c)];
      if (j > static_cast<int>(i) && !groups.dropped[static_cast<size_t>(j)]) candidates.insert(j);
    }
    for (const int j : candidates) {
      KernelGroup& p = list[static_cast<size_t>(j)];
      if (p.kind != KernelGroup::Kind::pointwise) continue;
      // The segment reading the row values; a pointwise group may hold independent segments
      // side by side, the others stay in it.
      const int s = reading_segment(g, p, value, operand->shape);
      if (s < 0) continue;
      const KernelSegment tail = p.segments[static_cast<size_t>(s)];
      const bool same_pass = std::all_of(tail.outputs.begin(), tail.outputs.end(), [&](NodeId o) {
        return (forward[static_cast<size_t>(o)] != 0) == pass && !assigned.count(o);
      });
      if (!same_pass) continue;
      const std::vector<NodeId> tail_inputs =
          external_inputs(g, std::span<const KernelSegment>(&tail, 1), p.inputs);
      std::vector<NodeId> inputs = reduction.inputs;
      bool ready_at_reduction = true;
      for (NodeId in : tail_inputs) {
        if (in == value || is_scalar_constant(g.node(in))) continue;
        ready_at_reduction =
            ready_at_reduction && groups.producer[static_cast<size_t>(in)] < static_cast<int>(i);
        if (std::find(inputs.begin(), inputs.end(), in) == inputs.end()) inputs.push_back(in);
      }
      if (2 + inputs.size() + tail.outputs.size() > max_bindings) continue;
      // Else at the pointwise kernel's place, if no kernel in between reads the row values (the
      // pointwise group keeping other segments stays where it is, so only a whole one moves).
      const bool whole = p.segments.size() == 1;
      bool read_between = false;
      for (NodeId c : consumers[static_cast<size_t>(value)]) {
        const int k = groups.owner[static_cast<size_t>(c)];
        read_between = read_between || (k > static_cast<int>(i) && k < j);
      }
      if (!ready_at_reduction && (read_between || !whole)) continue;

      KernelGroup merged = reduction;
      merged.inputs = std::move(inputs);
      merged.segments.push_back(tail);
      merged.nodes.insert(merged.nodes.end(), tail.nodes.begin(), tail.nodes.end());
      merged.outputs.insert(merged.outputs.end(), tail.outputs.begin(), tail.outputs.end());
      if (whole) {
        const size_t at = ready_at_reduction ? i : static_cast<size_t>(j);
        const size_t gone = ready_at_reduction ? static_cast<size_t>(j) : i;
        list[at] = std::move(merged);
        list[gone] = KernelGroup{};
        groups.dropped[gone] = 1;
        groups.claim(static_cast<int>(at));
      } else {
        // The pointwise group without the segment: its nodes, outputs and inputs.
        p.segments.erase(p.segments.begin() + s);
        const std::set<NodeId> moved(tail.nodes.begin(), tail.nodes.end());
        std::erase_if(p.nodes, [&](NodeId v) { return moved.count(v) != 0; });
        std::erase_if(p.outputs, [&](NodeId v) { return moved.count(v) != 0; });
        p.inputs = external_inputs(g, p.segments, p.inputs);
        list[i] = std::move(merged);
        groups.claim(static_cast<int>(i));
      }
      break;
    }
  }
  size_t k = 0;
  std::erase_if(list, [&](const KernelGroup&) { return groups.dropped[k++] != 0; });
}

}  // namespace mn::schedule
