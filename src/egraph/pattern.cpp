#include "egraph/pattern.h"

#include <meganeura/error.h>

namespace mn::egraph {

Pattern::Ref Pattern::var(std::string_view name) {
  for (size_t i = 0; i < var_names_.size(); ++i)
    if (var_names_[i] == name) return var_nodes_[i];
  PatternNode n;
  n.is_var = true;
  n.var = static_cast<uint32_t>(var_names_.size());
  var_names_.emplace_back(name);
  Ref r = static_cast<Ref>(nodes_.size());
  var_nodes_.push_back(r);
  nodes_.push_back(std::move(n));
  return r;
}

AttrVar Pattern::attr_var(std::string_view name) {
  for (size_t i = 0; i < attr_var_names_.size(); ++i)
    if (attr_var_names_[i] == name) return AttrVar{static_cast<uint32_t>(i)};
  attr_var_names_.emplace_back(name);
  return AttrVar{static_cast<uint32_t>(attr_var_names_.size() - 1)};
}

Pattern::Ref Pattern::op(OpId op, std::span<const Ref> children, AttrMatch attr) {
  Ref r = static_cast<Ref>(nodes_.size());
  for (Ref c : children)
    if (c >= r)
      throw Error("pattern: child " + std::to_string(c) + " of new node " + std::to_string(r) +
                  " does not exist yet (add children before parents)");
  if (attr.kind == AttrMatch::Kind::bind && attr.var >= attr_var_names_.size())
    throw Error("pattern: attribute variable " + std::to_string(attr.var) +
                " was not created with attr_var()");
  PatternNode n;
  n.op = op;
  n.attr = std::move(attr);
  n.children.assign(children.begin(), children.end());
  nodes_.push_back(std::move(n));
  return r;
}

void Pattern::set_root(Ref root) {
  if (root >= nodes_.size())
    throw Error("pattern: root " + std::to_string(root) + " out of range (" +
                std::to_string(nodes_.size()) + " nodes)");
  root_ = root;
}

Pattern::Ref Pattern::root() const {
  if (nodes_.empty()) throw Error("pattern: empty pattern has no root");
  return root_ ? *root_ : static_cast<Ref>(nodes_.size() - 1);
}

std::optional<Var> Pattern::find_var(std::string_view name) const {
  for (size_t i = 0; i < var_names_.size(); ++i)
    if (var_names_[i] == name) return Var{static_cast<uint32_t>(i)};
  return std::nullopt;
}

std::optional<AttrVar> Pattern::find_attr_var(std::string_view name) const {
  for (size_t i = 0; i < attr_var_names_.size(); ++i)
    if (attr_var_names_[i] == name) return AttrVar{static_cast<uint32_t>(i)};
  return std::nullopt;
}

Var Pattern::var_of(std::string_view name) const {
  if (auto v = find_var(name)) return *v;
  throw Error("pattern: no variable ?" + std::string(name));
}

AttrVar Pattern::attr_var_of(std::string_view name) const {
  if (auto v = find_attr_var(name)) return *v;
  throw Error("pattern: no attribute variable " + std::string(name));
}

bool Pattern::is_ground(Ref r) const {
  const PatternNode& n = nodes_[r];
  if (n.is_var || n.attr.kind != AttrMatch::Kind::equal || n.attr.test) return false;
  for (Ref c : n.children)
    if (!is_ground(c)) return false;
  return true;
}

std::string Pattern::to_string(
    const std::function<std::string(OpId, const AttrMatch&)>& head) const {
  std::function<std::string(Ref)> print = [&](Ref r) -> std::string {
    const PatternNode& n = nodes_[r];
    if (n.is_var) return "?" + var_names_[n.var];
    std::string h = head(n.op, n.attr);
    if (n.children.empty()) return h;
    std::string s = "(" + h;
    for (Ref c : n.children) s += " " + print(c);
    return s + ")";
  };
  return print(root());
}

}  // namespace mn::egraph
