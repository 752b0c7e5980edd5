#pragma once
// Patterns: terms over operators with class variables (?x), attribute tests (exact word, any,
// a predicate callback on the word) and attribute variables, which bind an attribute word on
// the search side so the apply side can reuse it (reshape(reshape(x, s1), s2) -> reshape(x, s2)).
//
// A pattern is a small DAG of PatternNodes stored in insertion order: children are added before
// their parents, and the root is the last node added unless set_root() says otherwise.
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "egraph/id.h"

namespace mn::egraph {

// A class variable, numbered densely within its pattern.
struct Var {
  uint32_t index = 0;
};
// An attribute variable, numbered densely within its pattern.
struct AttrVar {
  uint32_t index = 0;
};

using AttrPredicate = std::function<bool(Attr)>;

// How a pattern node's attribute word is matched (search) and produced (apply).
struct AttrMatch {
  enum class Kind : uint8_t { any, equal, bind };
  Kind kind = Kind::equal;
  Attr value = 0;      // equal: the word
  uint32_t var = 0;    // bind: the attribute variable
  AttrPredicate test;  // optional further test on the word (search only)

  static AttrMatch any() { return {Kind::any, 0, 0, {}}; }
  static AttrMatch equal(Attr value) { return {Kind::equal, value, 0, {}}; }
  static AttrMatch where(AttrPredicate test) { return {Kind::any, 0, 0, std::move(test)}; }
  static AttrMatch bind(AttrVar v, AttrPredicate test = {}) {
    return {Kind::bind, 0, v.index, std::move(test)};
  }
  // Whether apply can produce the word: exact, or a variable the searcher binds.
  bool is_exact() const { return kind != Kind::any && !test; }
};

struct PatternNode {
  bool is_var = false;
  uint32_t var = 0;  // for variables
  OpId op = 0;       // for operator nodes
  AttrMatch attr;
  std::vector<uint32_t> children;
};

class Pattern {
 public:
  using Ref = uint32_t;

  // A node standing for class variable `name` (the same node for the same name).
  Ref var(std::string_view name);
  // Attribute variable `name` (the same variable for the same name); use with AttrMatch::bind.
  AttrVar attr_var(std::string_view name);
  Ref op(OpId op, std::span<const Ref> children, AttrMatch attr = AttrMatch::equal(0));
  Ref op(OpId op, std::initializer_list<Ref> children = {}, AttrMatch attr = AttrMatch::equal(0)) {
    return this->op(op, std::span<const Ref>(children.begin(), children.size()), std::move(attr));
  }
  Ref op(OpId op, Attr attr, std::initializer_list<Ref> children = {}) {
    return this->op(op, children, AttrMatch::equal(attr));
  }
  void set_root(Ref root);
  Ref root() const;
  bool empty() const { return nodes_.empty(); }

  const PatternNode& node(Ref r) const { return nodes_[r]; }
  size_t size() const { return nodes_.size(); }
  size_t num_vars() const { return var_names_.size(); }
  size_t num_attr_vars() const { return attr_var_names_.size(); }
  const std::vector<std::string>& var_names() const { return var_names_; }
  const std::vector<std::string>& attr_var_names() const { return attr_var_names_; }
  std::optional<Var> find_var(std::string_view name) const;
  std::optional<AttrVar> find_attr_var(std::string_view name) const;
  // Like find_var, but a missing name is an mn::Error.
  Var var_of(std::string_view name) const;
  AttrVar attr_var_of(std::string_view name) const;

  // No variables below `r` and every attribute exact: the subterm is one fixed class.
  bool is_ground(Ref r) const;
  // S-expression text; `head` names an operator node (its attribute included).
  std::string to_string(const std::function<std::string(OpId, const AttrMatch&)>& head) const;

 private:
  std::vector<PatternNode> nodes_;
  std::vector<std::string> var_names_;
  std::vector<Ref> var_nodes_;
  std::vector<std::string> attr_var_names_;
  std::optional<Ref> root_;
};

// A substitution: the classes and attribute words a match bound to the searcher's variables.
class Subst {
 public:
  Subst(const Id* ids, const Attr* attrs) : ids_(ids), attrs_(attrs) {}
  Id operator[](Var v) const { return ids_[v.index]; }
  Attr operator[](AttrVar v) const { return attrs_[v.index]; }

 private:
  const Id* ids_;
  const Attr* attrs_;
};

}  // namespace mn::egraph
