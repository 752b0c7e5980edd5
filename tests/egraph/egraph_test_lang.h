#pragma once
// The arithmetic language of egg's math tests, for the engine's tests: every token is its own
// operator except integers, which are the operator "num" with a rational constant packed in the
// attribute word. ConstFold is egg's constant-folding analysis over those rationals.
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>

#include <meganeura/error.h>

#include "egraph/analysis.h"
#include "egraph/egraph.h"
#include "egraph/extract.h"
#include "egraph/pattern.h"
#include "egraph/rewrite.h"
#include "egraph/sexpr.h"
#include "egraph/symbol_table.h"

namespace mn::egraph::test {

struct Rat {
  int64_t num = 0;
  int64_t den = 1;
  bool operator==(const Rat&) const = default;
};

// Normalized, and only when both parts fit the 32-bit halves of an attribute word.
inline std::optional<Rat> make_rat(int64_t num, int64_t den) {
  if (den == 0) return std::nullopt;
  if (den < 0) num = -num, den = -den;
  int64_t g = std::gcd(num < 0 ? -num : num, den);
  if (g > 1) num /= g, den /= g;
  if (num < INT32_MIN || num > INT32_MAX || den > INT32_MAX) return std::nullopt;
  return Rat{num, den};
}
inline Attr pack(Rat r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(r.num))) << 32) |
         static_cast<uint32_t>(r.den);
}
inline Rat unpack(Attr a) {
  return Rat{static_cast<int32_t>(static_cast<uint32_t>(a >> 32)),
             static_cast<int64_t>(a & 0xffffffffu)};
}

class MathLang {
 public:
  MathLang() {
    num = ops.intern("num");
    add = ops.intern("+");
    sub = ops.intern("-");
    mul = ops.intern("*");
    div = ops.intern("/");
    pow = ops.intern("pow");
    shl = ops.intern("<<");
    ln = ops.intern("ln");
    sqrt = ops.intern("sqrt");
    d = ops.intern("d");
  }

  OpResolver resolver() {
    return [this](std::string_view token, size_t) -> OpRef {
      char* end = nullptr;
      std::string s(token);
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size()) return {num, pack(Rat{v, 1})};
      return {ops.intern(token), 0};
    };
  }
  Pattern pat(std::string_view text) { return parse_pattern(text, resolver()); }
  Id term(EGraph& eg, std::string_view text) { return add_sexpr(eg, text, resolver()); }
  Rewrite rw(std::string name, std::string_view lhs, std::string_view rhs, Condition c = {}) {
    return Rewrite(std::move(name), pat(lhs), pat(rhs), std::move(c));
  }
  Id constant(EGraph& eg, Rat r) { return eg.add(num, pack(r), {}); }

  std::string head(OpId op, Attr attr) const {
    if (op == num) {
      Rat r = unpack(attr);
      return r.den == 1 ? std::to_string(r.num)
                        : std::to_string(r.num) + "/" + std::to_string(r.den);
    }
    return std::string(ops.name(op));
  }
  bool is_symbol(const ENode& n) const { return n.arity() == 0 && n.op() != num; }

  SymbolTable ops;
  OpId num, add, sub, mul, div, pow, shl, ln, sqrt, d;
};

// egg's ConstantFold: a class's data is its constant value, if it has one; modify adds the
// literal so rules and extraction see it.
class ConstFold : public TypedAnalysis<std::optional<Rat>> {
 public:
  explicit ConstFold(const MathLang& lang) : lang_(lang) {}

  std::optional<Rat> make(const EGraph& eg, const ENode& n) override {
    if (n.op() == lang_.num) return unpack(n.attr());
    if (n.arity() != 2) return std::nullopt;
    std::optional<Rat> a = data(n.child(0));
    std::optional<Rat> b = data(n.child(1));
    if (!a || !b) return std::nullopt;
    if (n.op() == lang_.add) return make_rat(a->num * b->den + b->num * a->den, a->den * b->den);
    if (n.op() == lang_.sub) return make_rat(a->num * b->den - b->num * a->den, a->den * b->den);
    if (n.op() == lang_.mul) return make_rat(a->num * b->num, a->den * b->den);
    if (n.op() == lang_.div && b->num != 0) return make_rat(a->num * b->den, a->den * b->num);
    return std::nullopt;
  }

  DidMerge merge(std::optional<Rat>& into, std::optional<Rat> from) override {
    ++merges;
    if (into && from) {
      if (*into != *from)
        throw Error("ConstFold: merged classes with constants " + std::to_string(into->num) + "/" +
                    std::to_string(into->den) + " and " + std::to_string(from->num) + "/" +
                    std::to_string(from->den));
      return {false, false};
    }
    if (!into && from) {
      into = from;
      return {true, false};
    }
    return {false, into.has_value()};
  }

  void modify(EGraph& eg, Id cls) override {
    std::optional<Rat> c = data(cls);
    if (c) eg.merge(cls, eg.add(lang_.num, pack(*c), {}));
  }

  size_t merges = 0;

 private:
  const MathLang& lang_;
};

// Tree size, with '<<' cheaper than '*' so strength reduction shows in extraction.
inline TreeCost ast_size() {
  return tree_cost([](const EGraph&, const ENode&) { return 1.0; });
}

}  // namespace mn::egraph::test
