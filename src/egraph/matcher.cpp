#include "egraph/matcher.h"

#include <algorithm>

#include <meganeura/error.h>

namespace mn::egraph {

namespace {
constexpr uint32_t unset = std::numeric_limits<uint32_t>::max();
}

struct CompiledPattern::State {
  const EGraph* egraph = nullptr;
  std::vector<Id> regs;
  std::vector<Attr> attrs;
  std::vector<Id> ground_ids;
  std::vector<Id> var_ids;
  SearchMatches* out = nullptr;
  size_t limit = 0;
};

uint32_t CompiledPattern::ground_index(const Pattern& p, Pattern::Ref r) {
  const PatternNode& n = p.node(r);
  Ground g{n.op, n.attr.value, {}};
  for (Pattern::Ref c : n.children) g.children.push_back(ground_index(p, c));
  ground_.push_back(std::move(g));
  return static_cast<uint32_t>(ground_.size() - 1);
}

CompiledPattern::CompiledPattern(const Pattern& p)
    : num_vars_(static_cast<uint32_t>(p.num_vars())),
      num_attr_vars_(static_cast<uint32_t>(p.num_attr_vars())) {
  var_regs_.assign(num_vars_, unset);
  std::vector<bool> attr_bound(num_attr_vars_, false);
  Pattern::Ref root = p.root();
  if (p.node(root).is_var) {
    var_root_ = true;
    var_regs_[p.node(root).var] = 0;
  } else {
    // Breadth-first, so a compare or lookup lands right after the bind that produces its
    // register and prunes before deeper binds enumerate anything.
    std::vector<std::pair<Pattern::Ref, uint32_t>> work{{root, 0}};
    for (size_t head = 0; head < work.size(); ++head) {
      auto [r, reg] = work[head];
      const PatternNode& n = p.node(r);
      Instr b;
      b.kind = Kind::bind;
      b.reg = reg;
      b.op = n.op;
      b.arity = static_cast<uint32_t>(n.children.size());
      b.other = num_regs_;
      num_regs_ += b.arity;
      switch (n.attr.kind) {
        case AttrMatch::Kind::any:
          b.attr_op = AttrOp::any;
          break;
        case AttrMatch::Kind::equal:
          b.attr_op = AttrOp::equal;
          b.value = n.attr.value;
          break;
        case AttrMatch::Kind::bind:
          b.attr_var = n.attr.var;
          b.attr_op = attr_bound[n.attr.var] ? AttrOp::check : AttrOp::bind;
          attr_bound[n.attr.var] = true;
          break;
      }
      if (n.attr.test) {
        b.test = static_cast<int32_t>(tests_.size());
        tests_.push_back(n.attr.test);
      }
      instrs_.push_back(b);
      for (uint32_t i = 0; i < b.arity; ++i) {
        Pattern::Ref c = n.children[i];
        uint32_t creg = b.other + i;
        const PatternNode& cn = p.node(c);
        if (cn.is_var) {
          if (var_regs_[cn.var] == unset) {
            var_regs_[cn.var] = creg;
          } else {
            Instr cmp;
            cmp.kind = Kind::compare;
            cmp.reg = var_regs_[cn.var];
            cmp.other = creg;
            instrs_.push_back(cmp);
          }
        } else if (p.is_ground(c)) {
          Instr lk;
          lk.kind = Kind::lookup;
          lk.reg = creg;
          lk.other = ground_index(p, c);
          instrs_.push_back(lk);
        } else {
          work.emplace_back(c, creg);
        }
      }
    }
  }
  for (uint32_t v = 0; v < num_vars_; ++v)
    if (var_regs_[v] == unset)
      throw Error("pattern: variable ?" + p.var_names()[v] + " does not occur under the root");
  for (uint32_t v = 0; v < num_attr_vars_; ++v)
    if (!attr_bound[v])
      throw Error("pattern: attribute variable " + p.attr_var_names()[v] +
                  " does not occur under the root");
}

bool CompiledPattern::head_matches(const Instr& in, const ENode& node, State& st) const {
  if (node.arity() != in.arity) return false;
  switch (in.attr_op) {
    case AttrOp::any:
      break;
    case AttrOp::equal:
      if (node.attr() != in.value) return false;
      break;
    case AttrOp::bind:
      st.attrs[in.attr_var] = node.attr();
      break;
    case AttrOp::check:
      if (st.attrs[in.attr_var] != node.attr()) return false;
      break;
  }
  if (in.test >= 0 && !tests_[in.test](node.attr())) return false;
  std::span<const Id> ch = node.children();
  std::copy(ch.begin(), ch.end(), st.regs.begin() + in.other);
  return true;
}

bool CompiledPattern::yield(State& st) const {
  for (uint32_t v = 0; v < num_vars_; ++v) st.var_ids[v] = st.regs[var_regs_[v]];
  st.out->push(st.regs[0], st.var_ids.data(), st.attrs.data());
  return st.out->size() >= st.limit;
}

// Returns true once the match limit is reached, which unwinds the whole search.
bool CompiledPattern::run(size_t pc, State& st) const {
  if (pc == instrs_.size()) return yield(st);
  const Instr& in = instrs_[pc];
  switch (in.kind) {
    case Kind::compare:
      return st.regs[in.reg] == st.regs[in.other] && run(pc + 1, st);
    case Kind::lookup:
      return st.regs[in.reg] == st.ground_ids[in.other] && run(pc + 1, st);
    case Kind::bind:
      break;
  }
  const EGraph& eg = *st.egraph;
  std::span<const Id> nodes = eg.class_nodes(st.regs[in.reg]);
  // Class nodes are sorted by (op, attr): jump to the operator (and word, when exact).
  auto first = std::partition_point(nodes.begin(), nodes.end(), [&](Id n) {
    const ENode& node = eg.node(n);
    if (node.op() != in.op) return node.op() < in.op;
    return in.attr_op == AttrOp::equal && node.attr() < in.value;
  });
  for (auto it = first; it != nodes.end(); ++it) {
    const ENode& node = eg.node(*it);
    if (node.op() != in.op) break;
    if (in.attr_op == AttrOp::equal && node.attr() != in.value) break;
    if (head_matches(in, node, st) && run(pc + 1, st)) return true;
  }
  return false;
}

bool CompiledPattern::start(const EGraph& egraph, State& st) const {
  if (!egraph.is_clean()) throw Error("e-matching needs a rebuilt e-graph (call rebuild())");
  st.egraph = &egraph;
  st.regs.assign(num_regs_, no_id);
  st.attrs.assign(num_attr_vars_, 0);
  st.var_ids.assign(num_vars_, no_id);
  st.ground_ids.assign(ground_.size(), no_id);
  std::vector<Id> children;
  for (size_t g = 0; g < ground_.size(); ++g) {
    children.clear();
    for (uint32_t c : ground_[g].children) children.push_back(st.ground_ids[c]);
    Id id = egraph.lookup(ground_[g].op, ground_[g].attr, children);
    // A ground subterm missing from the e-graph means no match anywhere.
    if (id == no_id) return false;
    st.ground_ids[g] = id;
  }
  return true;
}

void CompiledPattern::search(const EGraph& egraph, SearchMatches& out, size_t limit) const {
  if (out.size() >= limit) return;
  State st;
  st.out = &out;
  st.limit = limit;
  if (!start(egraph, st)) return;
  if (var_root_) {
    for (Id id = 0; id < egraph.num_ids(); ++id) {
      if (!egraph.is_root(id)) continue;
      st.regs[0] = id;
      if (run(0, st)) return;
    }
    return;
  }
  const Instr& root = instrs_[0];
  for (Id n : egraph.nodes_with_op(root.op)) {
    if (!head_matches(root, egraph.node(n), st)) continue;
    st.regs[0] = egraph.find(n);
    if (run(1, st)) return;
  }
}

void CompiledPattern::search_class(const EGraph& egraph, Id cls, SearchMatches& out,
                                   size_t limit) const {
  if (out.size() >= limit) return;
  State st;
  st.out = &out;
  st.limit = limit;
  if (!start(egraph, st)) return;
  st.regs[0] = egraph.find(cls);
  run(0, st);
}

}  // namespace mn::egraph
