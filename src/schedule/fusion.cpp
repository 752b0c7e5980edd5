#include "schedule/fusion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "codegen/fused_pointwise.h"
#include "codegen/fused_reduce.h"
#include "codegen/widened_operands.h"
#include "ir/op_def.h"
#include "schedule/widened_loads.h"

namespace mn::schedule {

bool broadcasts_to(const Shape& small, const Shape& big) {
  if (small.size() > big.size()) return false;
  const size_t lead = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i) {
    if (small[i] != 1 && small[i] != big[lead + i]) return false;
  }
  return true;
}

std::vector<std::vector<NodeId>> needed_consumers(const Graph& g, const std::vector<char>& needed) {
  std::vector<std::vector<NodeId>> consumers(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (!needed[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) {
      auto& c = consumers[in];
      if (c.empty() || c.back() != static_cast<NodeId>(i)) c.push_back(static_cast<NodeId>(i));
    }
  }
  return consumers;
}

std::map<NodeId, int> group_readers(std::span<const KernelGroup> groups) {
  std::map<NodeId, int> readers;
  for (const KernelGroup& k : groups) {
    for (NodeId in : std::set<NodeId>(k.inputs.begin(), k.inputs.end())) ++readers[in];
  }
  return readers;
}

std::map<NodeId, int> group_producers(std::span<const KernelGroup> groups) {
  std::map<NodeId, int> producer;
  for (size_t i = 0; i < groups.size(); ++i) {
    for (NodeId o : groups[i].outputs) producer[o] = static_cast<int>(i);
  }
  return producer;
}

std::vector<TensorType> node_input_types(const Graph& g, const Node& n) {
  std::vector<TensorType> types;
  types.reserve(n.inputs.size());
  for (NodeId in : n.inputs) types.push_back(g.node(in).type);
  return types;
}

bool without_extras_but_a_norm(const KernelGroup& k) {
  return k.gemv.sibling < 0 && k.gemv.stacked.empty() && k.gemv.then < 0 &&
         k.gemv.combine_splits == 0 && k.rope.node < 0 && k.append.k_write < 0 &&
         !k.attention_partials;
}

bool without_extras(const KernelGroup& k) {
  return k.gemv.norm < 0 && without_extras_but_a_norm(k);
}

std::set<NodeId> kept_values(const Graph& g) {
  std::set<NodeId> kept;
  for (const auto& [name, id] : g.outputs()) kept.insert(id);
  for (const auto& [target, value] : g.assignments()) kept.insert(value);
  return kept;
}

bool read_widened_by_all(const Graph& g, NodeId value, std::span<const NodeId> readers,
                         const codegen::DeviceTraits* device) {
  const NodeId source = g.node(value).inputs.empty() ? -1 : g.node(value).inputs.front();
  return std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
    const Node& reader = g.node(r);
    for (size_t i = 0; i < reader.inputs.size(); ++i) {
      if (reader.inputs[i] != value) continue;
      if (codegen::always_reads_widened(reader, static_cast<int>(i))) continue;
      if (!device || source < 0) return false;
      const std::vector<TensorType> types = node_input_types(g, reader);
      const codegen::LowerContext ctx{reader, types, *device};
      if (!codegen::reads_widened_operand(ctx, static_cast<int>(i), g.node(source).type.dtype)) {
        return false;
      }
    }
    return true;
  });
}

namespace {

struct Builder {
  const Graph& g;
  const FusionOptions& options;
  size_t n;
  std::vector<char> needed, sink, assigned;  // assigned: values of assignments
  std::vector<char> forward;                 // with options.deferred: the forward pass
  std::vector<std::vector<NodeId>> consumers;  // needed consumers, without repeats
  std::vector<int> group_of;
  struct Work {
    KernelGroup::Kind kind = KernelGroup::Kind::single;
    std::vector<NodeId> nodes;
    Shape domain;
    bool alive = true;
    // reduction: the reduction and the DAGs fused before and after it.
    NodeId anchor = -1;
    std::vector<NodeId> prologue, epilogue;
  };
  std::vector<Work> groups;
  std::vector<int> stamp;
  int stamp_now = 0;

  Builder(const Graph& graph, const FusionOptions& o) : g(graph), options(o), n(graph.size()) {
    needed = needed_nodes(g);
    if (!options.deferred.empty()) forward = forward_nodes(g);
    sink.assign(n, 0);
    for (const auto& [name, id] : g.outputs()) sink[id] = 1;
    assigned.assign(n, 0);
    for (const auto& [target, value] : g.assignments()) sink[value] = assigned[value] = 1;
    consumers = needed_consumers(g, needed);
    group_of.assign(n, -1);
  }

  const Node& node(NodeId id) const { return g.node(id); }

  bool fusable(NodeId id) const { return fusable_node(g, id) && !absorbed_widening(id); }

  // A widening of a computed 16-bit value that all its readers load widened themselves
  // (codegen::always_reads_widened): it stays single, to be dropped by widened_loads.h.
  bool absorbed_widening(NodeId id) const {
    if (widened_source(g, id) < 0 || sink[id] || consumers[id].empty()) return false;
    return read_widened_by_all(g, id, consumers[id], options.device);
  }

  int new_group(KernelGroup::Kind kind, NodeId id) {
    groups.push_back({kind, {id}, node(id).type.shape, true});
    group_of[id] = static_cast<int>(groups.size() - 1);
    return group_of[id];
  }

  // Group `from` reaches group `target` through consumer edges.
  bool reaches(int from, int target) {
    ++stamp_now;
    if (stamp.size() < groups.size()) stamp.resize(groups.size(), 0);
    std::vector<int> stack{from};
    stamp[from] = stamp_now;
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      if (x == target) return true;
      for (NodeId v : groups[x].nodes) {
        for (NodeId c : consumers[v]) {
          const int y = group_of[c];
          if (y < 0 || y == x || stamp[y] == stamp_now) continue;
          stamp[y] = stamp_now;
          stack.push_back(y);
        }
      }
    }
    return false;
  }

  // A path from group `from` to group `to` through some other group.
  bool path_avoiding(int from, int to) {
    ++stamp_now;
    if (stamp.size() < groups.size()) stamp.resize(groups.size(), 0);
    std::vector<int> stack;
    auto push_successors = [&](int x) {
      for (NodeId v : groups[x].nodes) {
        for (NodeId c : consumers[v]) {
          const int y = group_of[c];
          if (y < 0 || y == x || stamp[y] == stamp_now) continue;
          if (x == from && y == to) continue;  // the direct edge becomes internal
          stamp[y] = stamp_now;
          stack.push_back(y);
        }
      }
    };
    stamp[from] = stamp_now;
    push_successors(from);
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      if (x == to) return true;
      push_successors(x);
    }
    return false;
  }

  // Sibling fusion: the pointwise groups of `v`'s consumers over `v`'s shape merge into one
  // where no other group lies between them, so `v` is computed once for all of them.
  void merge_consumer_groups(NodeId v) {
    std::vector<int> xs;
    for (NodeId c : consumers[v]) {
      const int x = group_of[c];
      if (groups[x].kind == KernelGroup::Kind::pointwise &&
          groups[x].domain == node(v).type.shape &&
          std::find(xs.begin(), xs.end(), x) == xs.end()) {
        xs.push_back(x);
      }
    }
    for (size_t i = 1; i < xs.size(); ++i) {
      const int a = xs[0], b = xs[i];
      if (feeds_prologue(a) || feeds_prologue(b)) continue;
      std::vector<NodeId> nodes = groups[a].nodes;
      nodes.insert(nodes.end(), groups[b].nodes.begin(), groups[b].nodes.end());
      if (external_inputs(nodes).size() + outputs_of(nodes).size() > options.max_bindings) continue;
      if (phases_mix(groups[a].nodes, groups[b].nodes)) continue;
      if (path_avoiding(a, b) || path_avoiding(b, a)) continue;
      for (NodeId u : groups[b].nodes) group_of[u] = a;
      groups[a].nodes = std::move(nodes);
      groups[b].nodes.clear();
      groups[b].alive = false;
    }
  }

  // The group computes one value that only a reduction reads, one that takes the group as
  // its prologue (fuse_prologues): another output would make it a stored value again.
  bool feeds_prologue(int x) const {
    const std::vector<NodeId> outs = outputs_of(groups[x].nodes);
    if (outs.size() != 1 || sink[outs.front()] || consumers[outs.front()].size() != 1) {
      return false;
    }
    const Node& red = node(consumers[outs.front()].front());
    return red.inputs.size() == 1 &&
           codegen::reduce_accepts_fusion(red, std::vector<TensorType>{node(outs.front()).type});
  }

  bool deferred(NodeId v) const { return !options.deferred.empty() && options.deferred[v]; }
  // Deferred nodes (recomputed copies, a training step's backward values) and forward nodes
  // never share a kernel: the kernel would run in the forward pass and keep its values.
  bool phases_mix(const std::vector<NodeId>& a, const std::vector<NodeId>& b) const {
    if (options.deferred.empty()) return false;
    auto any = [&](const std::vector<NodeId>& xs, auto pred) {
      return std::any_of(xs.begin(), xs.end(), pred);
    };
    auto is_deferred = [&](NodeId v) { return deferred(v); };
    auto is_forward = [&](NodeId v) { return forward[v] != 0; };
    return (any(a, is_deferred) && any(b, is_forward)) || (any(a, is_forward) && any(b, is_deferred));
  }
  bool may_join(NodeId v, int x) const { return !phases_mix({v}, groups[x].nodes); }

  // Pointwise node `v` (its consumers already grouped) joins a consumer's group, or starts one.
  void place_pointwise(NodeId v) {
    const Shape& shape = node(v).type.shape;
    const auto& cs = consumers[v];
    if (options.siblings && cs.size() > 1) merge_consumer_groups(v);
    if (!sink[v] && !cs.empty()) {
      const int g0 = group_of[cs.front()];
      const bool all_in =
          std::all_of(cs.begin(), cs.end(), [&](NodeId c) { return group_of[c] == g0; });
      if (all_in && groups[g0].kind == KernelGroup::Kind::pointwise &&
          broadcasts_to(shape, groups[g0].domain) && fits(v, g0) && may_join(v, g0)) {
        join(v, g0);
        return;
      }
    }
    // As one more output of a consumer's group of the same shape, the one reading it most.
    std::map<int, int> count;
    for (NodeId c : cs) {
      const int x = group_of[c];
      if (groups[x].kind == KernelGroup::Kind::pointwise && groups[x].domain == shape) ++count[x];
    }
    std::vector<std::pair<int, int>> candidates;
    for (const auto& [x, k] : count) {
      if (!feeds_prologue(x)) candidates.emplace_back(-k, -x);
    }
    std::sort(candidates.begin(), candidates.end());
    for (const auto& [k, negx] : candidates) {
      const int x = -negx;
      bool legal = fits(v, x) && may_join(v, x);
      for (NodeId c : cs) {
        if (!legal) break;
        if (group_of[c] != x && reaches(group_of[c], x)) {
          legal = false;
          break;
        }
      }
      if (legal) {
        join(v, x);
        return;
      }
    }
    new_group(KernelGroup::Kind::pointwise, v);
  }

  // The group's kernel with `v` added still binds few enough buffers.
  bool fits(NodeId v, int x) const {
    std::vector<NodeId> nodes = groups[x].nodes;
    nodes.push_back(v);
    return external_inputs(nodes).size() + outputs_of(nodes).size() <= options.max_bindings;
  }

  void join(NodeId v, int x) {
    groups[x].nodes.push_back(v);
    group_of[v] = x;
  }

  std::vector<NodeId> outputs_of(const std::vector<NodeId>& nodes) const {
    std::set<NodeId> in(nodes.begin(), nodes.end());
    std::vector<NodeId> out;
    for (NodeId v : in) {
      const bool outside = sink[v] || std::any_of(consumers[v].begin(), consumers[v].end(),
                                                  [&](NodeId c) { return !in.count(c); });
      if (outside) out.push_back(v);
    }
    return out;
  }

  std::vector<NodeId> external_inputs(const std::vector<NodeId>& nodes) const {
    std::set<NodeId> in(nodes.begin(), nodes.end());
    std::vector<NodeId> out;
    for (NodeId v : in) {
      for (NodeId i : node(v).inputs) {
        if (!in.count(i) && !is_scalar_constant(node(i)) &&
            std::find(out.begin(), out.end(), i) == out.end()) {
          out.push_back(i);
        }
      }
    }
    return out;
  }

  // A matmul all of whose consumers are in one pointwise group over the matmul's shape takes
  // that group as its epilogue: output 0 leaves through the matmul's store, the group's other
  // outputs are stored by the epilogue beside it. A conv2d likewise; its value may also be
  // needed outside the group (the relu gradient's mask reads the pre-activation, which for a
  // conv is the conv itself, its bias being inside it): it is then one more output of the
  // epilogue, provided no group reading it leads back into the epilogue's group.
  void fuse_epilogues() {
    for (size_t i = 0; i < n; ++i) {
      const auto m = static_cast<NodeId>(i);
      const Node& mm = node(m);
      const bool conv = mm.op_name() == "conv2d";
      const bool anchor =
          conv ? options.conv_epilogue : options.matmul_epilogue && mm.op_name() == "matmul";
      if (!needed[i] || !anchor || consumers[i].empty()) continue;
      // A 16-bit product (mixed precision) too: its epilogue reads the accumulator rounded as
      // the product's store would round it (schedule/fusion_lower.cpp).
      const bool narrow_product = !conv && is_half_float(mm.type.dtype);
      if ((mm.type.dtype != DType::f32 && !narrow_product) || (sink[i] && !conv)) continue;
      // Pointwise groups of the product's shape reading it merge where they may, as siblings
      // reading a pointwise value do, so that one of them holds all its readers.
      if (options.siblings && !conv && consumers[i].size() > 1) merge_consumer_groups(m);
      // The group reading the matmul most.
      int x = -1, best = 0;
      for (NodeId c : consumers[i]) {
        const int y = group_of[c];
        if (groups[y].kind != KernelGroup::Kind::pointwise || groups[y].domain != mm.type.shape) {
          continue;
        }
        const auto k = std::count_if(consumers[i].begin(), consumers[i].end(),
                                     [&](NodeId d) { return group_of[d] == y; });
        if (k > best) x = y, best = static_cast<int>(k);
      }
      if (x < 0) continue;
      Work& w = groups[x];
      // An update of parameters or state (an optimizer's) stays a pointwise group: there it
      // writes into the tensors it updates (plan/in_place.h) among the step's last launches,
      // where an epilogue would store new copies, live until the assignments copy them back.
      if (std::any_of(w.nodes.begin(), w.nodes.end(), [&](NodeId v) { return assigned[v]; })) {
        continue;
      }
      bool legal = true;
      for (NodeId c : consumers[i]) {
        if (group_of[c] == x) continue;
        // Only a conv's value is stored beside its epilogue.
        legal = legal && conv && !reaches(group_of[c], x);
      }
      if (!legal) continue;
      // A 16-bit product whose group only widens it, or feeds a reduction as its prologue,
      // stays 16-bit: its readers widen it as they load (schedule/widened_loads.h), reading
      // half the bytes an f32 copy would take.
      if (narrow_product && (feeds_prologue(x) ||
                             std::all_of(w.nodes.begin(), w.nodes.end(),
                                         [&](NodeId v) { return node(v).op_name() == "cast"; }))) {
        continue;
      }
      // The product's own store writes the group's first output in the product's dtype (f32):
      // a group storing a 16-bit value (a cast) keeps its own kernel. A 16-bit product's kernels
      // store 16-bit values already (rounding as a cast does), so its epilogue may end in one:
      // silu(x·Wgᵀ)·(x·Wuᵀ) narrowed for the next product.
      const std::vector<NodeId> stored = outputs_of(w.nodes);
      if (!std::all_of(stored.begin(), stored.end(), [&](NodeId o) {
            return node(o).type.dtype == DType::f32 ||
                   (narrow_product && is_half_float(node(o).type.dtype));
          })) {
        continue;
      }
      std::vector<NodeId> all = w.nodes;
      all.push_back(m);
      // The operands, the output, then every operand the epilogue reads (the operands again if
      // it reads them) and its other outputs.
      size_t bindings = mm.inputs.size() + outputs_of(all).size();
      for (NodeId e : external_inputs(w.nodes)) bindings += e == m ? 0 : 1;
      if (bindings > options.max_bindings) continue;
      groups[group_of[m]].alive = false;
      w.kind = KernelGroup::Kind::matmul_epilogue;
      w.nodes.push_back(m);
      group_of[m] = x;
    }
  }

  // A reduction whose operand is the one output of a pointwise group read by nothing else
  // takes that group as its prologue.
  void fuse_prologues() {
    for (size_t i = 0; i < n; ++i) {
      const auto r = static_cast<NodeId>(i);
      const Node& red = node(r);
      if (!needed[i] || red.inputs.size() != 1) continue;
      const NodeId p = red.inputs.front();
      if (sink[p] || consumers[p].size() != 1 || group_of[p] < 0) continue;
      if (!codegen::reduce_accepts_fusion(red, std::vector<TensorType>{node(p).type})) continue;
      const int x = group_of[p];
      Work& w = groups[x];
      if (w.kind != KernelGroup::Kind::pointwise || outputs_of(w.nodes).size() != 1) continue;
      const size_t operands = external_inputs(w.nodes).size();
      // Binding 0 repeats the first operand; the output (or partials) is binding 1.
      if (operands == 0 || operands + 2 > options.max_bindings) continue;
      groups[group_of[r]].alive = false;
      w.kind = KernelGroup::Kind::reduction;
      w.anchor = r;
      w.prologue = w.nodes;
      w.nodes.push_back(r);
      group_of[r] = x;
    }
  }

  // A reduction all of whose consumers are in one single-output pointwise group over the
  // reduced shape takes that group as its epilogue.
  void fuse_reduce_epilogues() {
    for (size_t i = 0; i < n; ++i) {
      const auto r = static_cast<NodeId>(i);
      const Node& red = node(r);
      if (!needed[i] || sink[i] || red.inputs.size() != 1 || consumers[i].empty()) continue;
      if (!codegen::reduce_accepts_fusion(red, std::vector<TensorType>{node(red.inputs[0]).type})) {
        continue;
      }
      const int xr = group_of[r];
      Work& wr = groups[xr];
      const bool plain = wr.kind == KernelGroup::Kind::single && wr.nodes.size() == 1;
      const bool with_prologue = wr.kind == KernelGroup::Kind::reduction && wr.epilogue.empty();
      if (!plain && !with_prologue) continue;
      const int x = group_of[consumers[i].front()];
      Work& w = groups[x];
      if (w.kind != KernelGroup::Kind::pointwise || w.domain != red.type.shape) continue;
      if (!std::all_of(consumers[i].begin(), consumers[i].end(),
                       [&](NodeId c) { return group_of[c] == x; })) {
        continue;
      }
      const std::vector<NodeId> stored = outputs_of(w.nodes);
      if (stored.size() != 1) continue;
      // The reduction's store writes the epilogue's value in the reduction's dtype, or in the
      // 16-bit dtype of a narrowing cast (it rounds as the cast does).
      const DType out = node(stored.front()).type.dtype;
      if (out != red.type.dtype && !is_half_float(out)) continue;
      std::vector<NodeId> all = wr.nodes;
      all.insert(all.end(), w.nodes.begin(), w.nodes.end());
      if (external_inputs(all).size() + 2 > options.max_bindings) continue;
      wr.kind = KernelGroup::Kind::reduction;
      wr.anchor = r;
      wr.epilogue = w.nodes;
      wr.nodes = all;
      for (NodeId v : w.nodes) group_of[v] = xr;
      w.alive = false;
    }
  }

  KernelGroup finish(int x) const {
    const Work& w = groups[x];
    KernelGroup k;
    k.kind = w.kind;
    k.nodes = w.nodes;
    std::sort(k.nodes.begin(), k.nodes.end());
    k.outputs = outputs_of(k.nodes);
    if (w.kind == KernelGroup::Kind::single) {
      k.inputs = node(k.nodes.front()).inputs;
      return k;
    }
    KernelSegment seg;
    seg.domain = w.domain;
    seg.outputs = k.outputs;
    if (w.kind == KernelGroup::Kind::matmul_epilogue) {
      // The matmul first, its operands as inputs 0 and 1, then the epilogue's operands.
      const NodeId m = w.nodes.back();  // appended last by fuse_epilogues
      const auto it = std::find(k.nodes.begin(), k.nodes.end(), m);
      k.nodes.erase(it);
      seg.nodes = k.nodes;
      k.nodes.insert(k.nodes.begin(), m);
      k.anchor = m;
      k.inputs = node(m).inputs;
      std::vector<NodeId> all = seg.nodes;
      all.push_back(m);
      for (NodeId e : external_inputs(all)) {
        if (std::find(k.inputs.begin(), k.inputs.end(), e) == k.inputs.end()) k.inputs.push_back(e);
      }
    } else if (w.kind == KernelGroup::Kind::reduction) {
      // Segment 0 computes the operand in the loads (stores nothing), segment 1 the stored
      // value from the reduced one; either may be empty.
      const NodeId r = w.anchor, p = node(r).inputs.front();
      KernelSegment pro, epi;
      pro.domain = node(p).type.shape;
      pro.nodes = w.prologue;
      std::sort(pro.nodes.begin(), pro.nodes.end());
      if (!pro.nodes.empty()) pro.outputs = {p};
      epi.domain = node(r).type.shape;
      epi.nodes = w.epilogue;
      std::sort(epi.nodes.begin(), epi.nodes.end());
      if (!epi.nodes.empty()) epi.outputs = k.outputs;
      k.anchor = r;
      k.nodes = pro.nodes;
      k.nodes.push_back(r);
      k.nodes.insert(k.nodes.end(), epi.nodes.begin(), epi.nodes.end());
      // Without a prologue the reduction reads its operand as input 0.
      if (pro.nodes.empty()) k.inputs = {p};
      for (NodeId e : external_inputs(k.nodes)) {
        if (std::find(k.inputs.begin(), k.inputs.end(), e) == k.inputs.end()) k.inputs.push_back(e);
      }
      k.segments = {std::move(pro), std::move(epi)};
      return k;
    } else {
      seg.nodes = k.nodes;
      k.inputs = external_inputs(k.nodes);
    }
    k.segments.push_back(std::move(seg));
    return k;
  }
};

// The group graph: each group's successors (the groups reading its values), the number of its
// predecessors, its last node (its position in the graph), and whether it is a tail group: a
// pointwise group whose values feed only other tail groups, assignments and outputs (the
// optimizer's updates, launched together at the end of the step).
struct GroupGraph {
  std::vector<std::set<int>> succ;
  std::vector<int> indegree;
  std::vector<NodeId> last;
  std::vector<char> tail;
};

// GroupGraph::tail, successors first (a reverse topological order of Kahn's algorithm).
std::vector<char> tail_groups(const Builder& b, const GroupGraph& gg) {
  const size_t count = b.groups.size();
  std::vector<int> indegree = gg.indegree, order;
  for (size_t x = 0; x < count; ++x) {
    if (b.groups[x].alive && indegree[x] == 0) order.push_back(static_cast<int>(x));
  }
  for (size_t i = 0; i < order.size(); ++i) {
    for (int y : gg.succ[static_cast<size_t>(order[i])]) {
      if (--indegree[y] == 0) order.push_back(y);
    }
  }
  std::vector<char> tail(count, 0);
  for (size_t i = order.size(); i-- > 0;) {
    const int x = order[i];
    tail[x] = b.groups[x].kind == KernelGroup::Kind::pointwise &&
              std::all_of(gg.succ[x].begin(), gg.succ[x].end(), [&](int y) { return tail[y]; });
  }
  return tail;
}

GroupGraph group_graph(const Builder& b) {
  const size_t count = b.groups.size();
  GroupGraph gg{std::vector<std::set<int>>(count), std::vector<int>(count, 0),
                std::vector<NodeId>(count, -1)};
  for (size_t x = 0; x < count; ++x) {
    if (!b.groups[x].alive) continue;
    for (NodeId v : b.groups[x].nodes) {
      gg.last[x] = std::max(gg.last[x], v);
      for (NodeId c : b.consumers[v]) {
        const int y = b.group_of[c];
        if (y != static_cast<int>(x) && gg.succ[x].insert(y).second) ++gg.indegree[y];
      }
    }
  }
  gg.tail = tail_groups(b, gg);
  return gg;
}

// The live groups in a topological order close to the graph's (by each group's last node).
std::vector<int> dispatch_order(const Builder& b, const GroupGraph& gg,
                                const FusionOptions& options) {
  const Graph& g = b.g;
  const size_t count = b.groups.size();
  const std::vector<std::set<int>>& succ = gg.succ;
  const std::vector<NodeId>& last = gg.last;
  std::vector<int> indegree = gg.indegree;
  // Groups that depend on nothing launched since the last barrier go first: each barrier
  // (a group reading what the previous ones wrote) then waits for as much work as is ready
  // (a decoding step's q, k and v projections together, then their rotary embeddings and cache
  // writes together), instead of the graph's interleaving paying one per kernel.
  using Ready = std::pair<NodeId, int>;
  using Queue = std::priority_queue<Ready, std::vector<Ready>, std::greater<>>;
  Queue free_now, after_barrier;  // ready groups whose inputs precede / follow the last barrier
  // Ready groups of deferred values: held until the order reaches their first node, or until
  // launching them frees more memory than they store (the last reader of an activation: a
  // weight gradient, however late the graph computes it).
  std::vector<int> held;
  std::vector<NodeId> first(count, -1);
  for (size_t x = 0; x < count; ++x) {
    if (!b.groups[x].alive) continue;
    for (NodeId v : b.groups[x].nodes) {
      if (b.deferred(v) && (first[x] < 0 || v < first[x])) first[x] = v;
    }
  }
  // Groups that read only sources (a gradient accumulator's zeros) are ready at the start but
  // may be needed late: one storing a large value is held until a group reading it waits for
  // nothing else, so that the value does not stay live through the step.
  std::vector<char> lazy(count, 0);
  auto ready = [&](Queue& q, int x) {
    if (first[x] >= 0 || lazy[x]) {
      held.push_back(x);
    } else {
      q.emplace(last[x], x);
    }
  };
  // Per group, the computed values it reads and those it stores; per value, the groups reading
  // it that have not launched yet.
  std::vector<int> readers_left(g.size(), 0);
  std::vector<std::vector<NodeId>> reads(count), stores(count);
  for (size_t x = 0; x < count; ++x) {
    if (!b.groups[x].alive) continue;
    for (NodeId in : b.external_inputs(b.groups[x].nodes)) {
      if (is_source_op(g.node(in).op_name())) continue;
      reads[x].push_back(in);
      ++readers_left[in];
    }
    stores[x] = b.outputs_of(b.groups[x].nodes);
  }
  auto bytes = [&](NodeId v) {
    const TensorType& t = g.node(v).type;
    return static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  };
  auto stored_bytes = [&](int x) {
    uint64_t stored = 0;
    for (NodeId v : stores[x]) stored += bytes(v);
    return stored;
  };
  auto frees_more_than_it_stores = [&](int x) {
    uint64_t freed = 0;
    for (NodeId v : reads[x]) freed += readers_left[v] == 1 && !b.sink[v] ? bytes(v) : 0;
    return freed > stored_bytes(x);
  };
  // Tail groups launch at the end of the step (fuse), so they do not move the order's position
  // forward when they become ready. A group whose values only the tail reads is a parameter's
  // gradient (FusionOptions::eager_gradients).
  auto is_tail = [&](int x) { return gg.tail[x] != 0; };
  constexpr uint64_t kLazyBytes = uint64_t{1} << 20;
  for (size_t x = 0; x < count; ++x) {
    if (!b.groups[x].alive || !reads[x].empty() || is_tail(static_cast<int>(x))) continue;
    lazy[x] = stored_bytes(static_cast<int>(x)) >= kLazyBytes;
  }
  auto wanted_now = [&](int x) {
    return std::any_of(succ[x].begin(), succ[x].end(), [&](int y) { return indegree[y] == 1; });
  };
  auto only_tail_reads = [&](int x) {
    return !is_tail(x) && std::all_of(succ[x].begin(), succ[x].end(), is_tail);
  };
  std::vector<int> order;
  NodeId reached = -1;  // the furthest graph position launched so far
  auto release = [&](size_t i) {
    after_barrier.emplace(last[held[i]], held[i]);
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (size_t x = 0; x < count; ++x) {
    if (b.groups[x].alive && indegree[x] == 0) ready(free_now, static_cast<int>(x));
  }
  while (!free_now.empty() || !after_barrier.empty() || !held.empty()) {
    for (size_t i = 0; i < held.size();) {
      const int h = held[i];
      const bool go = lazy[h] ? wanted_now(h)
                              : first[h] <= reached || frees_more_than_it_stores(h) ||
                                    (options.eager_gradients && only_tail_reads(h));
      if (go) {
        release(i);
      } else {
        ++i;
      }
    }
    if (free_now.empty() && after_barrier.empty()) {
      // Nothing else is ready: the held group earliest in the graph, a lazy one only when no
      // other is held (it would otherwise go first, and live from there).
      release(static_cast<size_t>(std::min_element(held.begin(), held.end(),
                                                   [&](int a, int c) {
                                                     return std::pair(lazy[a] != 0, first[a]) <
                                                            std::pair(lazy[c] != 0, first[c]);
                                                   }) -
                                  held.begin()));
    }
    if (free_now.empty()) std::swap(free_now, after_barrier);
    const int x = free_now.top().second;
    free_now.pop();
    order.push_back(x);
    if (!is_tail(x) && !(options.eager_gradients && only_tail_reads(x))) {
      reached = std::max(reached, last[x]);
    }
    for (NodeId v : reads[x]) --readers_left[v];
    for (int y : succ[x]) {
      if (--indegree[y] == 0) ready(after_barrier, y);
    }
  }

  return order;
}

}  // namespace

bool fusable_node(const Graph& g, NodeId id) {
  const Node& nd = g.node(id);
  // A stored 16-bit tensor widened to f32 (a weight) is read widened by the kernels that use
  // it (widened_loads.h): its cast stays single, to be dropped there.
  if (const NodeId src = widened_source(g, id); src >= 0 && is_source_op(g.node(src).op_name())) {
    return false;
  }
  std::vector<TensorType> in;
  for (NodeId i : nd.inputs) in.push_back(g.node(i).type);
  return codegen::fusable_pointwise(nd, in);
}

bool is_scalar_constant(const Node& node) {
  return node.op_name() == "constant" && node.type.dtype == DType::f32 && node.type.numel() == 1;
}

std::vector<char> needed_nodes(const Graph& g) {
  const size_t n = g.size();
  std::vector<char> needed(n, 0);
  for (const auto& [name, id] : g.outputs()) needed[id] = 1;
  for (const auto& [target, value] : g.assignments()) needed[value] = needed[target] = 1;
  for (NodeId id : g.inputs()) needed[id] = 1;
  for (NodeId id : g.parameters()) needed[id] = 1;
  for (NodeId id : g.states()) needed[id] = 1;
  for (size_t i = n; i-- > 0;) {
    if (!needed[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) needed[in] = 1;
  }
  return needed;
}

std::vector<char> forward_nodes(const Graph& g) {
  std::vector<char> in(g.size(), 0);
  std::vector<NodeId> stack;
  for (const auto& [name, id] : g.outputs()) stack.push_back(id);
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (in[static_cast<size_t>(n)]) continue;
    in[static_cast<size_t>(n)] = 1;
    for (NodeId i : g.node(n).inputs) stack.push_back(i);
  }
  return in;
}

void drop_unread_groups(const Graph& g, std::vector<KernelGroup>& groups,
                        const std::function<bool(NodeId)>& droppable) {
  std::set<NodeId> read;
  for (const KernelGroup& group : groups) {
    for (NodeId in : group.inputs) {
      if (in != group.gemv.sibling) read.insert(in);
    }
  }
  for (const auto& [name, id] : g.outputs()) read.insert(id);
  for (const auto& [target, value] : g.assignments()) read.insert(value);
  std::erase_if(groups, [&](const KernelGroup& group) {
    return group.kind == KernelGroup::Kind::single && group.nodes.size() == 1 &&
           droppable(group.nodes.front()) && !read.count(group.nodes.front());
  });
}

std::vector<KernelGroup> unfused_groups(const Graph& g) {
  const std::vector<char> needed = needed_nodes(g);
  std::vector<KernelGroup> out;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& nd = g.node(static_cast<NodeId>(i));
    if (!needed[i] || is_source_op(nd.op_name())) continue;
    KernelGroup k;
    k.nodes = {static_cast<NodeId>(i)};
    k.inputs = nd.inputs;
    k.outputs = {static_cast<NodeId>(i)};
    out.push_back(std::move(k));
  }
  return out;
}

std::vector<KernelGroup> fuse(const Graph& g, const FusionOptions& options) {
  Builder b(g, options);
  for (size_t i = g.size(); i-- > 0;) {
    const auto v = static_cast<NodeId>(i);
    if (!b.needed[i] || is_source_op(g.node(v).op_name())) continue;
    if (options.pointwise && b.fusable(v)) {
      b.place_pointwise(v);
    } else if (!options.pointwise && b.fusable(v)) {
      b.new_group(KernelGroup::Kind::pointwise, v);
    } else {
      b.new_group(KernelGroup::Kind::single, v);
    }
  }
  if (options.matmul_epilogue || options.conv_epilogue) b.fuse_epilogues();
  if (options.reduction) {
    b.fuse_prologues();
    b.fuse_reduce_epilogues();
  }

  const GroupGraph gg = group_graph(b);
  const size_t count = b.groups.size();
  const std::vector<std::set<int>>& succ = gg.succ;
  const std::vector<int> order = dispatch_order(b, gg, options);

  // Per tail group (GroupGraph::tail), its height: the longest chain of tail groups after it.
  std::vector<int> height(count, -1);
  if (options.horizontal) {
    for (size_t r = order.size(); r-- > 0;) {
      const int x = order[r];
      if (!gg.tail[x]) continue;
      height[x] = 0;
      for (int y : succ[x]) height[x] = std::max(height[x], height[y] + 1);
    }
  }

  // Independent pointwise groups in launches over concatenated index ranges.
  constexpr size_t kMaxSegments = 64;  // each thread tests its range against every segment's
  auto merge_into = [&](const std::vector<int>& members, std::vector<KernelGroup>& dest) {
    KernelGroup merged;
    auto flush = [&] {
      if (merged.segments.empty()) return;
      dest.push_back(std::move(merged));
      merged = KernelGroup{};
    };
    for (int x : members) {
      KernelGroup k = b.finish(x);
      std::vector<NodeId> inputs = merged.inputs;
      for (NodeId i : k.inputs) {
        if (std::find(inputs.begin(), inputs.end(), i) == inputs.end()) inputs.push_back(i);
      }
      if (!merged.segments.empty() &&
          (inputs.size() + merged.outputs.size() + k.outputs.size() > options.max_bindings ||
           merged.segments.size() >= kMaxSegments)) {
        flush();
        inputs = k.inputs;
      }
      merged.kind = KernelGroup::Kind::pointwise;
      merged.tail = merged.tail || gg.tail[x] != 0;
      merged.inputs = std::move(inputs);
      merged.nodes.insert(merged.nodes.end(), k.nodes.begin(), k.nodes.end());
      merged.outputs.insert(merged.outputs.end(), k.outputs.begin(), k.outputs.end());
      merged.segments.push_back(std::move(k.segments.front()));
    }
    flush();
  };

  // Small pointwise groups that read only sources (bias corrections of the step count, rotary
  // tables) depend on nothing computed: they run together, first. The size bound keeps large
  // values from living through the whole step; 16-bit copies of parameters (mixed precision's
  // weights) are exempt: the forward reads them first and the backward last, so they live
  // through most of the step wherever they are made.
  constexpr int64_t kHoistElements = 65536;
  auto narrowed_parameter = [&](NodeId o) {
    const Node& c = g.node(o);
    return c.op_name() == "cast" && is_half_float(c.type.dtype) &&
           g.node(c.inputs.front()).op_name() == "parameter";
  };
  auto hoistable = [&](int x) {
    if (!options.horizontal || b.groups[x].kind != KernelGroup::Kind::pointwise) return false;
    const KernelGroup k = b.finish(x);
    return std::all_of(k.inputs.begin(), k.inputs.end(),
                       [&](NodeId i) { return is_source_op(g.node(i).op_name()); }) &&
           std::all_of(k.outputs.begin(), k.outputs.end(), [&](NodeId o) {
             return g.node(o).type.numel() <= kHoistElements || narrowed_parameter(o);
           });
  };
  std::vector<KernelGroup> out, body;
  std::vector<int> hoisted;
  std::map<int, std::vector<int>, std::greater<>> levels;
  // With spread_updates, the tail groups the order lists together (those that became ready at
  // one level: it puts them after the level's other groups) launch as one, in place; the plan
  // then moves each to the next barrier window that opens anyway (plan/launch_levels.h).
  std::vector<int> ready_updates;
  auto launch_updates = [&] {
    merge_into(ready_updates, body);
    ready_updates.clear();
  };
  for (int x : order) {
    const bool tail = height[x] >= 0;
    if (tail && !options.spread_updates) {
      levels[height[x]].push_back(x);
    } else if (hoistable(x)) {
      hoisted.push_back(x);
    } else if (tail) {
      // One reading another's value (a shared bias correction) starts a launch of its own.
      if (std::any_of(ready_updates.begin(), ready_updates.end(),
                      [&](int y) { return succ[y].count(x) != 0; })) {
        launch_updates();
      }
      ready_updates.push_back(x);
    } else {
      launch_updates();
      body.push_back(b.finish(x));
    }
  }
  launch_updates();
  merge_into(hoisted, out);
  out.insert(out.end(), std::make_move_iterator(body.begin()), std::make_move_iterator(body.end()));
  for (const auto& [h, members] : levels) merge_into(members, out);
  // A lone pointwise op keeps its own lowering (several elements per thread on large tensors).
  for (KernelGroup& k : out) {
    if (k.kind == KernelGroup::Kind::pointwise && k.nodes.size() == 1) {
      k.kind = KernelGroup::Kind::single;
      k.inputs = g.node(k.nodes.front()).inputs;
      k.segments.clear();
    }
  }
  return out;
}

}  // namespace mn::schedule
