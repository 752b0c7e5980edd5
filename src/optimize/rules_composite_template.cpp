#include "optimize/rules_composite_template.h"

#include <algorithm>

#include <meganeura/error.h>

namespace mn::optimize::composite {

std::optional<Expansion> expand(const OpDef& def, const Attrs& attrs,
                                std::span<const TensorType> types) {
  if (!def.decompose) return std::nullopt;
  Expansion e;
  std::vector<Tensor> operands;
  operands.reserve(types.size());
  try {
    const TensorType out = def.infer(attrs, types);
    for (size_t i = 0; i < types.size(); ++i) {
      Tensor t = e.graph.input("x" + std::to_string(i), types[i].shape, types[i].dtype);
      e.inputs.push_back(t.id());
      operands.push_back(t);
    }
    Node node{&def, attrs, e.inputs, out, {}};
    Tensor r = def.decompose(node, operands);
    if (!r.valid() || &r.graph() != &e.graph || r.type() != out) return std::nullopt;
    e.root = r.id();
  } catch (const Error&) {  // ShapeError too: the op or a primitive rejects these operands
    return std::nullopt;
  }
  // Reachable nodes only: a decomposition may build helpers it does not use.
  std::vector<bool> seen(e.graph.size(), false);
  std::vector<NodeId> stack{e.root};
  for (NodeId in : e.inputs) seen[static_cast<size_t>(in)] = true;
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    e.order.push_back(id);
    for (NodeId c : e.graph.node(id).inputs) stack.push_back(c);
  }
  // Scratch node ids are already a topological order (operands before users).
  std::sort(e.order.begin(), e.order.end());
  return e;
}

const Expansion* ExpansionCache::get(TensorEGraph& teg, const OpDef& def, egraph::Attr attrs,
                                     std::span<const TensorType> types) {
  uint64_t key = egraph::mix64(reinterpret_cast<uintptr_t>(&def) ^ egraph::mix64(attrs));
  for (const TensorType& t : types) {
    key = egraph::mix64(key ^ (static_cast<uint64_t>(t.dtype) + 0x9e3779b97f4a7c15ULL));
    for (int64_t d : t.shape) key = egraph::mix64(key ^ static_cast<uint64_t>(d));
  }
  std::vector<Entry>& bucket = entries_[key];
  for (const Entry& e : bucket) {
    if (e.def == &def && e.attrs == attrs &&
        std::equal(e.types.begin(), e.types.end(), types.begin(), types.end())) {
      return e.expansion.get();
    }
  }
  Entry entry{&def, attrs, std::vector<TensorType>(types.begin(), types.end()), nullptr};
  if (auto e = expand(def, teg.attrs(attrs), types)) {
    e->words.assign(e->graph.size(), 0);
    for (NodeId id : e->order)
      e->words[static_cast<size_t>(id)] = teg.intern(e->graph.node(id).attrs);
    entry.expansion = std::make_unique<Expansion>(std::move(*e));
  }
  bucket.push_back(std::move(entry));
  return bucket.back().expansion.get();
}

Id lookup_node(const TensorEGraph& teg, OpId op, egraph::Attr word, std::span<const Id> children) {
  const egraph::EGraph& eg = teg.egraph();
  Id r = eg.lookup(op, word, children);
  if (r == egraph::no_id && children.size() == 2 && is_commutative(teg.op_def(op).name)) {
    const Id swapped[2] = {children[1], children[0]};
    r = eg.lookup(op, word, swapped);
  }
  return r;
}

bool Blocker::resolved(const TensorEGraph& teg) const {
  const egraph::EGraph& eg = teg.egraph();
  if (landed != egraph::no_id) return eg.find(landed) == eg.find(expected);
  return lookup_node(teg, op, word, children) != egraph::no_id;
}

std::optional<Id> instantiate(TensorEGraph& teg, const Expansion& e, std::span<const Id> operands,
                              bool add, Blocker* missing) {
  egraph::EGraph& eg = teg.egraph();
  // Scratch node id -> class; inputs first.
  std::vector<Id> cls(e.graph.size(), egraph::no_id);
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    cls[static_cast<size_t>(e.inputs[i])] = eg.find(operands[i]);
  }
  std::vector<Id> children;
  for (NodeId id : e.order) {
    const Node& n = e.graph.node(id);
    const std::string_view name = n.op_name();
    children.clear();
    for (NodeId c : n.inputs) children.push_back(cls[static_cast<size_t>(c)]);
    Id r = egraph::no_id;
    const auto word_of = [&] {
      return e.words.empty() ? teg.intern(n.attrs) : e.words[static_cast<size_t>(id)];
    };
    OpId op = 0;
    egraph::Attr word = 0;
    if (name == "constant") {
      op = teg.constant_op();
      word = word_of();
      r = add ? eg.add(op, word, {}) : eg.lookup(op, word, {});
    } else if (n.inputs.empty()) {
      return std::nullopt;  // another source (a parameter...): no decomposition makes one
    } else if (add) {
      auto added = teg.try_add(*n.op, n.attrs, children);
      if (!added) return std::nullopt;
      r = *added;
    } else {
      op = teg.op(name);
      word = word_of();
      r = lookup_node(teg, op, word, children);
    }
    if (r == egraph::no_id) {
      if (missing) *missing = Blocker{op, word, children, egraph::no_id, egraph::no_id};
      return std::nullopt;
    }
    cls[static_cast<size_t>(id)] = eg.find(r);
  }
  const Id root = cls[static_cast<size_t>(e.root)];
  if (root == egraph::no_id) return std::nullopt;
  return root;
}

bool is_commutative(std::string_view op) { return op == "add" || op == "mul"; }

std::optional<ExpansionPattern> pattern_of(const TensorEGraph& teg, const Expansion& e,
                                           PatternVariant variant) {
  if (e.order.empty()) return std::nullopt;  // the root is an operand
  ExpansionPattern ep;
  std::vector<egraph::Pattern::Ref> ref(e.graph.size());
  std::vector<std::string> text(e.graph.size());
  std::vector<bool> used(e.inputs.size(), false);
  std::vector<int32_t> operand_of(e.graph.size(), -1);
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    operand_of[static_cast<size_t>(e.inputs[i])] = static_cast<int32_t>(i);
  }
  ep.attr_var.assign(e.graph.size(), -1);
  std::vector<egraph::Pattern::Ref> children;
  for (size_t k = 0; k < e.order.size(); ++k) {
    const NodeId id = e.order[k];
    const Node& n = e.graph.node(id);
    children.clear();
    std::string t = std::string(n.op_name()) + "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      const auto c = static_cast<size_t>(n.inputs[j]);
      if (operand_of[c] >= 0) {
        const std::string name = "x" + std::to_string(operand_of[c]);
        used[static_cast<size_t>(operand_of[c])] = true;
        children.push_back(ep.pattern.var(name));
        t += (j ? "," : "") + name;
      } else {
        children.push_back(ref[c]);
        t += (j ? "," : "") + text[c];
      }
    }
    t += ")";
    const bool commutative = children.size() == 2 && is_commutative(n.op_name());
    const auto is_constant = [&](size_t j) {
      return e.graph.node(n.inputs[j]).op_name() == "constant";
    };
    bool swap = variant.swap_root && id == e.root;
    if (variant.constants_right && commutative && is_constant(0) && !is_constant(1)) swap = !swap;
    if (swap) {
      if (!commutative) return std::nullopt;
      std::swap(children[0], children[1]);
      t += "swapped";
    }
    const auto av = ep.pattern.attr_var("a" + std::to_string(id));
    ep.attr_var[static_cast<size_t>(id)] = static_cast<int32_t>(av.index);
    ref[static_cast<size_t>(id)] =
        ep.pattern.op(teg.op(n.op_name()), children, egraph::AttrMatch::bind(av));
    text[static_cast<size_t>(id)] = "n" + std::to_string(k);
    ep.key += "n" + std::to_string(k) + "=" + t + ";";
  }
  if (!std::all_of(used.begin(), used.end(), [](bool u) { return u; })) return std::nullopt;
  ep.pattern.set_root(ref[static_cast<size_t>(e.root)]);
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    ep.operand_vars.push_back(ep.pattern.var_of("x" + std::to_string(i)));
  }
  return ep;
}

}  // namespace mn::optimize::composite
