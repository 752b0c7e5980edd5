#pragma once
// The machinery under the composite rules: a composite op's decomposition built (by the op
// table's own `decompose`) on given operand types into a scratch graph, copied into the e-graph
// (adding nodes, or only looking them up), and turned into an e-matching pattern.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <meganeura/graph.h>

#include "egraph/pattern.h"
#include "optimize/tensor_egraph.h"

namespace mn::optimize::composite {

// A decomposition on concrete operand types: scratch inputs stand for the operands.
struct Expansion {
  Graph graph;
  std::vector<NodeId> inputs;  // the scratch input node of each operand
  NodeId root = -1;
  std::vector<NodeId> order;  // the non-input nodes the root depends on, operands first
  // Per scratch node: its attribute word in the e-graph (interned once), when cached.
  std::vector<egraph::Attr> words;
};

// Expansions by (op, attributes, operand types), with their attribute words interned: the layers
// of a model share one, so a large constant of a decomposition (an attention's causal mask) is
// built and hashed once, not once per use.
class ExpansionCache {
 public:
  // nullptr when the op rejects the operands (remembered too).
  const Expansion* get(TensorEGraph& teg, const OpDef& def, egraph::Attr attrs,
                       std::span<const TensorType> types);

 private:
  struct Entry {
    const OpDef* def = nullptr;
    egraph::Attr attrs = 0;
    std::vector<TensorType> types;
    std::unique_ptr<Expansion> expansion;
  };
  std::unordered_map<uint64_t, std::vector<Entry>> entries_;
};

// Decomposes `def` with `attrs` over operands of `types`; nullopt when the op rejects them.
// (`words` stays empty: ExpansionCache fills it.)
std::optional<Expansion> expand(const OpDef& def, const Attrs& attrs,
                                std::span<const TensorType> types);

// Why a lookup-only instantiation did not land in the class expected: the first node missing
// from the e-graph, or (all found) the class it landed in. Worth retrying only once that node
// exists or the two classes merged (resolved() says so).
struct Blocker {
  OpId op = 0;
  egraph::Attr word = 0;
  std::vector<Id> children;   // the missing node's operands (no_id: none missing)
  Id landed = egraph::no_id;  // otherwise: where the computation landed
  Id expected = egraph::no_id;
  bool resolved(const TensorEGraph& teg) const;
};

// Copies an expansion into the e-graph with its inputs standing for `operands`. With `add`, missing
// nodes are added (nullopt if one does not type-check); without, nothing is added and the result is
// the class of the existing computation, or nullopt when some node of it is not in the e-graph
// (exact on a rebuilt e-graph, which is where recognition runs; `missing`, when given, is told
// which). Lookups of a commutative op accept its operands in either order.
std::optional<Id> instantiate(TensorEGraph& teg, const Expansion& e, std::span<const Id> operands,
                              bool add, Blocker* missing = nullptr);

// A lookup that accepts a commutative op's two operands in either order.
Id lookup_node(const TensorEGraph& teg, OpId op, egraph::Attr word, std::span<const Id> children);

// A structural pattern of an expansion: operands become variables ?x0.., every other node an
// operator node whose attribute word is bound to a variable (constants included), so a match
// says which classes and attribute words sit where the expansion has its nodes.
struct ExpansionPattern {
  egraph::Pattern pattern;
  std::vector<egraph::Var> operand_vars;  // per operand
  std::vector<int32_t> attr_var;          // per scratch node: its attribute variable, or -1
  std::string key;                        // the structure as text: equal keys, equal patterns
};
// nullopt when the expansion's root is an operand or some operand does not occur in it.
// Variants of the same computation (the variables are numbered the same in all): `swap_root`
// exchanges a commutative root's two operands; `constants_right` puts the constant operand of
// every commutative node second (`x * 0.5` for the decomposition's `0.5 * x`).
struct PatternVariant {
  bool swap_root = false;
  bool constants_right = false;
};
std::optional<ExpansionPattern> pattern_of(const TensorEGraph& teg, const Expansion& e,
                                           PatternVariant variant = {});

// add and mul: a * b and b * a are the same value (IEEE products and sums commute, and
// broadcasting is symmetric), so lookups may find either order.
bool is_commutative(std::string_view op);

}  // namespace mn::optimize::composite
