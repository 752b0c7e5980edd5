#include "optimize/rules_algebra.h"

#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "ir/ops/matmul.h"
#include "ir/ops/shape.h"

namespace mn::optimize {

using egraph::AttrMatch;
using egraph::AttrVar;
using egraph::EGraph;
using egraph::no_id;
using egraph::Pattern;
using egraph::Rewrite;
using egraph::Subst;
using egraph::Var;

namespace {

class RuleSet {
 public:
  explicit RuleSet(TensorEGraph& t) : t_(t) {}

  // Builds `lhs` => whatever `build` returns (no_id: nothing), merged only when it has the
  // matched class's type.
  using Build = std::function<Id(TensorEGraph&, Id eclass, const Subst&)>;
  void add(std::string name, Pattern lhs, Build build) {
    TensorEGraph* t = &t_;
    rules_.push_back(
        Rewrite::dynamic(std::move(name), std::move(lhs),
                         [t, build = std::move(build)](EGraph&, Id eclass, const Subst& s) -> Id {
                           const Id r = build(*t, eclass, s);
                           if (r == no_id || !t->same_type(r, eclass)) return no_id;
                           return r;
                         }));
  }
  OpId op(const char* name) const { return t_.op(name); }
  std::vector<Rewrite> take() { return std::move(rules_); }

 private:
  TensorEGraph& t_;
  std::vector<Rewrite> rules_;
};

bool is(const TensorEGraph& t, Id c, double v) {
  auto u = t.uniform_value(c);
  return u && *u == v;
}

// A node of `op` typed like `like` (the matched class), or no_id.
Id typed(TensorEGraph& t, const char* op, const Attrs& attrs, std::initializer_list<Id> children,
         Id like) {
  auto r = t.try_add_typed(mn::op_def(op), attrs,
                           std::span<const Id>(children.begin(), children.size()), t.type(like));
  return r ? *r : no_id;
}

// The permutation a transpose/permute applies to a tensor of rank `rank` (out[d] = in[perm[d]]).
std::optional<std::vector<int64_t>> perm_of(const TensorEGraph& t, OpId op, egraph::Attr attr,
                                            int rank) {
  const Attrs& a = t.attrs(attr);
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
  if (a.is<TransposeAttrs>()) {
    int64_t a0 = a.as<TransposeAttrs>().axis0, a1 = a.as<TransposeAttrs>().axis1;
    if (a0 < 0) a0 += rank;
    if (a1 < 0) a1 += rank;
    if (a0 < 0 || a1 < 0 || a0 >= rank || a1 >= rank) return std::nullopt;
    std::swap(perm[static_cast<size_t>(a0)], perm[static_cast<size_t>(a1)]);
    return perm;
  }
  if (a.is<PermuteAttrs>()) {
    const auto& p = a.as<PermuteAttrs>().perm;
    if (static_cast<int>(p.size()) != rank) return std::nullopt;
    for (int i = 0; i < rank; ++i) {
      int64_t v = p[static_cast<size_t>(i)];
      if (v < 0) v += rank;
      if (v < 0 || v >= rank) return std::nullopt;
      perm[static_cast<size_t>(i)] = v;
    }
    return perm;
  }
  (void)op;
  return std::nullopt;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

bool swaps_last_two(const std::vector<int64_t>& perm) {
  const size_t n = perm.size();
  if (n < 2) return false;
  for (size_t i = 0; i + 2 < n; ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return perm[n - 2] == static_cast<int64_t>(n - 1) && perm[n - 1] == static_cast<int64_t>(n - 2);
}

void identity_rules(RuleSet& rs) {
  // Neutral elements: the other operand comes back when the broadcast does not widen it.
  struct Neutral {
    const char* name;
    const char* op;
    double value;
    bool constant_right;
  };
  for (const Neutral& n : {Neutral{"mul-one", "mul", 1.0, true},
                           {"one-mul", "mul", 1.0, false},
                           {"add-zero", "add", 0.0, true},
                           {"zero-add", "add", 0.0, false},
                           {"sub-zero", "sub", 0.0, true},
                           {"div-one", "div", 1.0, true}}) {
    Pattern p;
    auto x = p.var("x"), c = p.var("c");
    if (n.constant_right)
      p.op(rs.op(n.op), {x, c});
    else
      p.op(rs.op(n.op), {c, x});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    const double value = n.value;
    rs.add(n.name, std::move(p), [vx, vc, value](TensorEGraph& t, Id, const Subst& s) {
      return is(t, s[vc], value) ? s[vx] : no_id;
    });
  }
  {  // 0 - x = -x
    Pattern p;
    p.op(rs.op("sub"), {p.var("c"), p.var("x")});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    rs.add("zero-sub", std::move(p), [vx, vc](TensorEGraph& t, Id e, const Subst& s) {
      return is(t, s[vc], 0.0) ? typed(t, "neg", {}, {s[vx]}, e) : no_id;
    });
  }
  for (bool right : {true, false}) {  // x · -1 = -x
    Pattern p;
    auto x = p.var("x"), c = p.var("c");
    if (right)
      p.op(rs.op("mul"), {x, c});
    else
      p.op(rs.op("mul"), {c, x});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    rs.add(right ? "mul-minus-one" : "minus-one-mul", std::move(p),
           [vx, vc](TensorEGraph& t, Id e, const Subst& s) {
             return is(t, s[vc], -1.0) ? typed(t, "neg", {}, {s[vx]}, e) : no_id;
           });
  }
  {
    Pattern p;
    p.op(rs.op("neg"), {p.op(rs.op("neg"), {p.var("x")})});
    const Var vx = p.var_of("x");
    rs.add("neg-neg", std::move(p), [vx](TensorEGraph&, Id, const Subst& s) { return s[vx]; });
  }
  // Ops that are the identity when the type does not change (the add() wrapper checks it).
  for (const char* op :
       {"broadcast_to", "reshape", "squeeze", "sum_to", "cast", "stop_gradient", "slice"}) {
    Pattern p;
    p.op(rs.op(op), {p.var("x")}, AttrMatch::any());
    const Var vx = p.var_of("x");
    rs.add(std::string("identity-") + op, std::move(p),
           [vx](TensorEGraph&, Id, const Subst& s) { return s[vx]; });
  }
  for (const char* op : {"transpose", "permute"}) {
    Pattern p;
    const AttrVar a = p.attr_var("a");
    p.op(rs.op(op), {p.var("x")}, AttrMatch::bind(a));
    const Var vx = p.var_of("x");
    const OpId id = rs.op(op);
    rs.add(std::string("identity-") + op, std::move(p),
           [vx, a, id](TensorEGraph& t, Id, const Subst& s) {
             auto perm = perm_of(t, id, s[a], t.type(s[vx]).rank());
             return perm && is_identity(*perm) ? s[vx] : no_id;
           });
  }
}

void sign_rules(RuleSet& rs) {
  {  // x + (-y) = x - y
    Pattern p;
    p.op(rs.op("add"), {p.var("x"), p.op(rs.op("neg"), {p.var("y")})});
    const Var vx = p.var_of("x"), vy = p.var_of("y");
    rs.add("add-neg", std::move(p), [vx, vy](TensorEGraph& t, Id e, const Subst& s) {
      return typed(t, "sub", {}, {s[vx], s[vy]}, e);
    });
  }
  {  // (-x) + y = y - x
    Pattern p;
    p.op(rs.op("add"), {p.op(rs.op("neg"), {p.var("x")}), p.var("y")});
    const Var vx = p.var_of("x"), vy = p.var_of("y");
    rs.add("neg-add", std::move(p), [vx, vy](TensorEGraph& t, Id e, const Subst& s) {
      return typed(t, "sub", {}, {s[vy], s[vx]}, e);
    });
  }
  {  // x - (-y) = x + y
    Pattern p;
    p.op(rs.op("sub"), {p.var("x"), p.op(rs.op("neg"), {p.var("y")})});
    const Var vx = p.var_of("x"), vy = p.var_of("y");
    rs.add("sub-neg", std::move(p), [vx, vy](TensorEGraph& t, Id e, const Subst& s) {
      return typed(t, "add", {}, {s[vx], s[vy]}, e);
    });
  }
  {  // -(x - y) = y - x
    Pattern p;
    p.op(rs.op("neg"), {p.op(rs.op("sub"), {p.var("x"), p.var("y")})});
    const Var vx = p.var_of("x"), vy = p.var_of("y");
    rs.add("neg-sub", std::move(p), [vx, vy](TensorEGraph& t, Id e, const Subst& s) {
      return typed(t, "sub", {}, {s[vy], s[vx]}, e);
    });
  }
}

void view_rules(RuleSet& rs) {
  // Chains of reshape-like views are one reshape to the final shape.
  const char* views[] = {"reshape", "squeeze", "unsqueeze"};
  for (const char* outer : views) {
    for (const char* inner : views) {
      Pattern p;
      p.op(rs.op(outer), {p.op(rs.op(inner), {p.var("x")}, AttrMatch::any())}, AttrMatch::any());
      const Var vx = p.var_of("x");
      rs.add(std::string(outer) + "-" + inner, std::move(p),
             [vx](TensorEGraph& t, Id e, const Subst& s) {
               if (t.type(s[vx]) == t.type(e)) return s[vx];
               return typed(t, "reshape", ReshapeAttrs{t.type(e).shape}, {s[vx]}, e);
             });
    }
  }
  // Permutation chains compose into one permute (or vanish).
  const char* perms[] = {"transpose", "permute"};
  for (const char* outer : perms) {
    for (const char* inner : perms) {
      Pattern p;
      const AttrVar a1 = p.attr_var("a1"), a2 = p.attr_var("a2");
      p.op(rs.op(outer), {p.op(rs.op(inner), {p.var("x")}, AttrMatch::bind(a2))},
           AttrMatch::bind(a1));
      const Var vx = p.var_of("x");
      const OpId o1 = rs.op(outer), o2 = rs.op(inner);
      rs.add(std::string(outer) + "-" + inner, std::move(p),
             [vx, a1, a2, o1, o2](TensorEGraph& t, Id e, const Subst& s) {
               const int rank = t.type(s[vx]).rank();
               auto p1 = perm_of(t, o1, s[a1], rank), p2 = perm_of(t, o2, s[a2], rank);
               if (!p1 || !p2) return no_id;
               std::vector<int64_t> composed(static_cast<size_t>(rank));
               for (size_t d = 0; d < composed.size(); ++d) {
                 composed[d] = (*p2)[static_cast<size_t>((*p1)[d])];
               }
               if (is_identity(composed)) return s[vx];
               return typed(t, "permute", PermuteAttrs{composed}, {s[vx]}, e);
             });
    }
  }
  // A permutation that moves only axes of size 1 keeps every element where it was: a reshape,
  // which is a view (attention heads of a one-token decode step, [B, 1, H, D] -> [B, H, 1, D]).
  for (const char* op : perms) {
    Pattern p;
    const AttrVar a = p.attr_var("a");
    p.op(rs.op(op), {p.var("x")}, AttrMatch::bind(a));
    const Var vx = p.var_of("x");
    const OpId id = rs.op(op);
    rs.add(std::string(op) + "-unit-axes", std::move(p),
           [vx, a, id](TensorEGraph& t, Id e, const Subst& s) {
             const Shape& in = t.type(s[vx]).shape;
             auto perm = perm_of(t, id, s[a], static_cast<int>(in.size()));
             if (!perm || is_identity(*perm)) return no_id;
             int64_t previous = -1;
             for (int64_t d : *perm) {
               if (in[static_cast<size_t>(d)] == 1) continue;
               if (d < previous) return no_id;
               previous = d;
             }
             return typed(t, "reshape", ReshapeAttrs{t.type(e).shape}, {s[vx]}, e);
           });
  }
  // A transpose of the last two axes of a matmul operand is the GEMM's transpose flag.
  for (const char* tr : perms) {
    for (bool left : {true, false}) {
      Pattern p;
      const AttrVar am = p.attr_var("m"), at = p.attr_var("t");
      auto moved = p.op(rs.op(tr), {p.var("x")}, AttrMatch::bind(at));
      auto other = p.var("y");
      if (left)
        p.op(rs.op("matmul"), {moved, other}, AttrMatch::bind(am));
      else
        p.op(rs.op("matmul"), {other, moved}, AttrMatch::bind(am));
      const Var vx = p.var_of("x"), vy = p.var_of("y");
      const OpId ot = rs.op(tr);
      rs.add(std::string("matmul-") + tr + (left ? "-a" : "-b"), std::move(p),
             [vx, vy, am, at, ot, left](TensorEGraph& t, Id e, const Subst& s) {
               auto perm = perm_of(t, ot, s[at], t.type(s[vx]).rank());
               if (!perm || !swaps_last_two(*perm)) return no_id;
               MatmulAttrs m = t.attrs_as<MatmulAttrs>(s[am]);
               if (left) {
                 m.transpose_a = !m.transpose_a;
                 return typed(t, "matmul", m, {s[vx], s[vy]}, e);
               }
               m.transpose_b = !m.transpose_b;
               return typed(t, "matmul", m, {s[vy], s[vx]}, e);
             });
    }
  }
  // (op(A)·op(B))ᵀ = op(B)ᵀ·op(A)ᵀ: a transposed product is the swapped product with flipped
  // flags, and the transpose copy disappears.
  for (const char* tr : perms) {
    Pattern p;
    const AttrVar am = p.attr_var("m"), at = p.attr_var("t");
    p.op(rs.op(tr), {p.op(rs.op("matmul"), {p.var("a"), p.var("b")}, AttrMatch::bind(am))},
         AttrMatch::bind(at));
    const Var va = p.var_of("a"), vb = p.var_of("b");
    const OpId ot = rs.op(tr);
    rs.add(
        std::string(tr) + "-matmul", std::move(p),
        [va, vb, am, at, ot](TensorEGraph& t, Id e, const Subst& s) {
          auto perm = perm_of(t, ot, s[at], t.type(e).rank());
          if (!perm || !swaps_last_two(*perm)) return no_id;
          if (t.type(s[va]).rank() < 2 || t.type(s[vb]).rank() < 2) return no_id;
          const MatmulAttrs& m = t.attrs_as<MatmulAttrs>(s[am]);
          return typed(t, "matmul", MatmulAttrs{!m.transpose_b, !m.transpose_a}, {s[vb], s[va]}, e);
        });
  }
}

// Elementwise binary ops broadcast their operands themselves.
void broadcast_rules(RuleSet& rs) {
  for (const char* op : {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
                         "le", "gt", "ge"}) {
    for (bool left : {true, false}) {
      Pattern p;
      auto b = p.op(rs.op("broadcast_to"), {p.var("x")}, AttrMatch::any());
      auto y = p.var("y");
      if (left)
        p.op(rs.op(op), {b, y});
      else
        p.op(rs.op(op), {y, b});
      const Var vx = p.var_of("x"), vy = p.var_of("y");
      rs.add(
          std::string(op) + (left ? "-broadcast-a" : "-broadcast-b"), std::move(p),
          [vx, vy, op, left](TensorEGraph& t, Id e, const Subst& s) {
            return left ? typed(t, op, {}, {s[vx], s[vy]}, e) : typed(t, op, {}, {s[vy], s[vx]}, e);
          });
    }
  }
}

void constant_rules(RuleSet& rs) {
  auto known = [](const TensorEGraph& t, Id c) { return t.constant(c) != nullptr; };
  // Constants to the right of mul/add, so the chains below see them.
  for (const char* op : {"mul", "add"}) {
    Pattern p;
    p.op(rs.op(op), {p.var("c"), p.var("x")});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    rs.add(std::string(op) + "-constant-right", std::move(p),
           [vx, vc, op, known](TensorEGraph& t, Id e, const Subst& s) {
             if (!known(t, s[vc]) || known(t, s[vx])) return no_id;
             return typed(t, op, {}, {s[vx], s[vc]}, e);
           });
  }
  // (x ∘ c1) ∘ c2 = x ∘ (c1 ∘ c2): the inner constant folds.
  struct Chain {
    const char* name;
    const char* inner;
    const char* outer;
    const char* combine;  // op combining c1 and c2, as (c2 combine c1) when swapped
    bool swapped;
  };
  for (const Chain& ch : {Chain{"mul-mul-constants", "mul", "mul", "mul", false},
                          {"add-add-constants", "add", "add", "add", false},
                          {"sub-add-constants", "sub", "add", "sub", true}}) {
    Pattern p;
    p.op(rs.op(ch.outer), {p.op(rs.op(ch.inner), {p.var("x"), p.var("c1")}), p.var("c2")});
    const Var vx = p.var_of("x"), v1 = p.var_of("c1"), v2 = p.var_of("c2");
    const Chain c = ch;
    rs.add(ch.name, std::move(p), [vx, v1, v2, c, known](TensorEGraph& t, Id e, const Subst& s) {
      if (!known(t, s[v1]) || !known(t, s[v2]) || known(t, s[vx])) return no_id;
      // x · c1 may already equal x · c1 · c2 (c1 = 0, or c2 = 1): the class then holds
      // (C · c2) for itself, and re-applying on that cycle mints c2², c2³... without end.
      if (t.egraph().find(s[vx]) == t.egraph().find(e)) return no_id;
      auto k = c.swapped ? t.try_add(c.combine, {}, {s[v2], s[v1]})
                         : t.try_add(c.combine, {}, {s[v1], s[v2]});
      if (!k) return no_id;
      return typed(t, c.outer, {}, {s[vx], *k}, e);
    });
  }
  {  // -(x · c) = x · (-c)
    Pattern p;
    p.op(rs.op("neg"), {p.op(rs.op("mul"), {p.var("x"), p.var("c")})});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    rs.add("neg-mul-constant", std::move(p),
           [vx, vc, known](TensorEGraph& t, Id e, const Subst& s) {
             if (!known(t, s[vc]) || t.egraph().find(s[vx]) == t.egraph().find(e)) return no_id;
             auto k = t.try_add("neg", {}, {s[vc]});
             return k ? typed(t, "mul", {}, {s[vx], *k}, e) : no_id;
           });
  }
  {  // (-x) · c = x · (-c)
    Pattern p;
    p.op(rs.op("mul"), {p.op(rs.op("neg"), {p.var("x")}), p.var("c")});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    rs.add("mul-neg-constant", std::move(p),
           [vx, vc, known](TensorEGraph& t, Id e, const Subst& s) {
             if (!known(t, s[vc]) || known(t, s[vx])) return no_id;
             auto k = t.try_add("neg", {}, {s[vc]});
             return k ? typed(t, "mul", {}, {s[vx], *k}, e) : no_id;
           });
  }
  // x / c = x · (1/c) where 1/c is exact (c a power of two), so nothing rounds differently;
  // the cost model picks the cheaper.
  {
    Pattern p;
    p.op(rs.op("div"), {p.var("x"), p.var("c")});
    const Var vx = p.var_of("x"), vc = p.var_of("c");
    rs.add("div-constant", std::move(p), [vx, vc](TensorEGraph& t, Id e, const Subst& s) {
      const Array* c = t.constant(s[vc]);
      if (!c || !is_float(c->dtype)) return no_id;
      Array r = *c;
      for (double& v : r.data) {
        int exponent = 0;
        if (v == 0 || !std::isfinite(v) || std::abs(std::frexp(v, &exponent)) != 0.5) return no_id;
        v = 1.0 / v;
      }
      return typed(t, "mul", {}, {s[vx], t.constant(r)}, e);
    });
  }
}

// Reductions and broadcasts that only drop or add axes of size 1 are reshapes (free views):
// common in batch-1 gradient graphs (sum_to of a [1, n, k] product onto an [n, k] weight).
// Negation and scalar factors move after a reduction, where the tensor is smaller.
void reduction_rules(RuleSet& rs) {
  for (const char* op : {"sum_to", "sum", "mean", "max", "min", "broadcast_to"}) {
    Pattern p;
    p.op(rs.op(op), {p.var("x")}, AttrMatch::any());
    const Var vx = p.var_of("x");
    rs.add(std::string(op) + "-unit-axes", std::move(p),
           [vx](TensorEGraph& t, Id e, const Subst& s) {
             const TensorType& in = t.type(s[vx]);
             const TensorType& out = t.type(e);
             if (in.numel() != out.numel() || in.dtype != out.dtype || in == out) return no_id;
             return typed(t, "reshape", ReshapeAttrs{out.shape}, {s[vx]}, e);
           });
  }
  for (const char* op : {"sum_to", "sum"}) {
    {
      Pattern p;
      const AttrVar a = p.attr_var("a");
      p.op(rs.op(op), {p.op(rs.op("neg"), {p.var("x")})}, AttrMatch::bind(a));
      const Var vx = p.var_of("x");
      rs.add(std::string(op) + "-neg", std::move(p),
             [vx, a, op](TensorEGraph& t, Id e, const Subst& s) {
               const Id x = s[vx];
               auto r = t.try_add(mn::op_def(op), t.attrs(s[a]), std::span<const Id>(&x, 1));
               return r ? typed(t, "neg", {}, {*r}, e) : no_id;
             });
    }
    {
      Pattern p;
      const AttrVar a = p.attr_var("a");
      p.op(rs.op(op), {p.op(rs.op("mul"), {p.var("x"), p.var("c")})}, AttrMatch::bind(a));
      const Var vx = p.var_of("x"), vc = p.var_of("c");
      rs.add(std::string(op) + "-mul-scalar", std::move(p),
             [vx, vc, a, op](TensorEGraph& t, Id e, const Subst& s) {
               if (t.type(s[vc]).rank() != 0) return no_id;
               const Id x = s[vx];
               auto r = t.try_add(mn::op_def(op), t.attrs(s[a]), std::span<const Id>(&x, 1));
               return r ? typed(t, "mul", {}, {*r, s[vc]}, e) : no_id;
             });
    }
  }
}

// Whether class c holds a widening of a 16-bit value (a bf16 product read as f32).
bool widens_16_bit(const TensorEGraph& t, Id c) {
  const egraph::EGraph& e = t.egraph();
  const OpId cast = t.op("cast");
  for (Id n : e.class_nodes(e.class_of(c))) {
    const egraph::ENode& node = e.node(n);
    if (node.op() != cast || node.children().size() != 1) continue;
    const DType from = t.type(node.children()[0]).dtype;
    if (is_half_float(from)) return true;
  }
  return false;
}

// x + scatter_add(0, i, u) = scatter_add(x, i, u) (and 0-based on the left): a gradient
// accumulated into the other contributions instead of into zeros. A tied embedding's table
// gradient is the head's product plus the lookup's scatter: no table-sized zeros then, and no
// sum of two table-sized values. The sum's rounding order changes (x joins before the updates).
// Not where x widens a 16-bit product: the scatter would then keep x's f32 copy from the
// product to the end of the backward pass, where the sum reads the 16-bit value itself.
void accumulation_rules(RuleSet& rs) {
  for (const bool scatter_first : {false, true}) {
    Pattern p;
    const AttrVar a = p.attr_var("a");
    const auto scatter =
        p.op(rs.op("scatter_add"), {p.var("z"), p.var("i"), p.var("u")}, AttrMatch::bind(a));
    const auto x = p.var("x");
    if (scatter_first) {
      p.op(rs.op("add"), {scatter, x});
    } else {
      p.op(rs.op("add"), {x, scatter});
    }
    const Var vx = p.var_of("x"), vz = p.var_of("z"), vi = p.var_of("i"), vu = p.var_of("u");
    rs.add(scatter_first ? "scatter-add-into" : "add-scatter-into", std::move(p),
           [=](TensorEGraph& t, Id e, const Subst& s) {
             if (!is(t, s[vz], 0.0) || t.type(s[vx]) != t.type(e) || widens_16_bit(t, s[vx])) {
               return no_id;
             }
             return typed(t, "scatter_add", t.attrs(s[a]), {s[vx], s[vi], s[vu]}, e);
           });
  }
}

}  // namespace

std::vector<Rewrite> algebra_rules(TensorEGraph& teg) {
  RuleSet rs(teg);
  identity_rules(rs);
  sign_rules(rs);
  view_rules(rs);
  broadcast_rules(rs);
  constant_rules(rs);
  reduction_rules(rs);
  accumulation_rules(rs);
  return rs.take();
}

}  // namespace mn::optimize
