#include "egraph/sexpr.h"

#include <cctype>
#include <string>
#include <vector>

#include <meganeura/error.h>

namespace mn::egraph {

namespace {

struct SExpr {
  std::string_view atom;  // empty for a list
  size_t offset = 0;
  std::vector<SExpr> items;
};

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  SExpr read_all() {
    SExpr e = read();
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the expression");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("s-expression: " + what + " at offset " + std::to_string(pos_) + " in \"" +
                std::string(text_) + "\"");
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  SExpr read() {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    SExpr e;
    e.offset = pos_;
    if (text_[pos_] == ')') fail("unexpected ')'");
    if (text_[pos_] == '(') {
      ++pos_;
      for (;;) {
        skip_space();
        if (pos_ >= text_.size()) fail("missing ')'");
        if (text_[pos_] == ')') {
          ++pos_;
          break;
        }
        e.items.push_back(read());
      }
      if (e.items.empty()) fail("empty list");
      if (!e.items[0].items.empty() || e.items[0].atom.empty())
        fail("a list must start with an operator");
      return e;
    }
    size_t start = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_])) &&
           text_[pos_] != '(' && text_[pos_] != ')')
      ++pos_;
    e.atom = text_.substr(start, pos_ - start);
    return e;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

bool is_var(std::string_view atom) { return atom.size() > 1 && atom[0] == '?'; }

Pattern::Ref to_pattern(const SExpr& e, Pattern& p, const OpResolver& resolve) {
  if (e.items.empty()) {
    if (is_var(e.atom)) return p.var(e.atom.substr(1));
    OpRef op = resolve(e.atom, 0);
    return p.op(op.op, {}, AttrMatch::equal(op.attr));
  }
  std::string_view head = e.items[0].atom;
  if (is_var(head))
    throw Error("s-expression: variable " + std::string(head) + " in operator position at offset " +
                std::to_string(e.offset));
  std::vector<Pattern::Ref> children;
  for (size_t i = 1; i < e.items.size(); ++i)
    children.push_back(to_pattern(e.items[i], p, resolve));
  OpRef op = resolve(head, children.size());
  return p.op(op.op, children, AttrMatch::equal(op.attr));
}

Id to_term(const SExpr& e, EGraph& eg, const OpResolver& resolve) {
  std::string_view head = e.items.empty() ? e.atom : e.items[0].atom;
  if (is_var(head))
    throw Error("s-expression: variable " + std::string(head) + " in a term at offset " +
                std::to_string(e.offset));
  std::vector<Id> children;
  for (size_t i = 1; i < e.items.size(); ++i) children.push_back(to_term(e.items[i], eg, resolve));
  OpRef op = resolve(head, children.size());
  return eg.add(op.op, op.attr, children);
}

}  // namespace

Pattern parse_pattern(std::string_view text, const OpResolver& resolve) {
  SExpr e = Reader(text).read_all();
  Pattern p;
  p.set_root(to_pattern(e, p, resolve));
  return p;
}

Id add_sexpr(EGraph& egraph, std::string_view text, const OpResolver& resolve) {
  return to_term(Reader(text).read_all(), egraph, resolve);
}

}  // namespace mn::egraph
