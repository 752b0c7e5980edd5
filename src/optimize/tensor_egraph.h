#pragma once
// The tensor encoding of the e-graph: one operator id per op-table entry, one attribute word per
// distinct mn::Attrs value, and an analysis that gives every e-class its TensorType and, when it
// is a known small constant, its value (constant folding adds the literal into the class).
//
// Invariant: every e-node of a class has the class's type. Rules build their right-hand sides
// with add()/try_add(), which infer the type from the children's and refuse (try_add: nullopt)
// what does not type-check; a rule must also skip a right-hand side whose type differs from the
// matched class's (same_type() says so).
//
// Source nodes (input, parameter, state, constant) keep their attributes (names, initializers,
// values), so two different sources never share a node.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/attrs.h>
#include <meganeura/graph.h>

#include "egraph/analysis.h"
#include "egraph/attr_table.h"
#include "egraph/egraph.h"
#include "egraph/extract.h"
#include "ir/op_def.h"

namespace mn::optimize {

using egraph::Id;
using egraph::OpId;

// Largest constant (in elements) the analysis keeps and folding produces.
inline constexpr int64_t max_folded_elements = 4096;

struct ClassData {
  TensorType type;
  std::shared_ptr<const Array> value;  // known value (at most max_folded_elements), else null
  bool literal = false;                // the class holds a constant node
  // The one value all elements share, when known: for constants of any size, and through ops
  // that only move elements (broadcast_to of a scalar 1 is "all ones" whatever its size).
  std::optional<double> uniform;
};

class TensorEGraph;

class TensorAnalysis final : public egraph::TypedAnalysis<ClassData> {
 public:
  explicit TensorAnalysis(TensorEGraph& owner) : owner_(owner) {}
  ClassData make(const egraph::EGraph& egraph, const egraph::ENode& node) override;
  egraph::DidMerge merge(ClassData& into, ClassData from) override;
  // Only the constant can change when a child's data changes (types never do), so the update
  // recomputes the value alone instead of re-inferring the type.
  bool on_update(const egraph::EGraph& egraph, Id cls, const egraph::ENode& node) override;
  void modify(egraph::EGraph& egraph, Id cls) override;

 private:
  friend class TensorEGraph;
  std::shared_ptr<const Array> fold(const egraph::EGraph& egraph, const egraph::ENode& node,
                                    const TensorType& type) const;
  std::optional<double> uniform_of(const egraph::ENode& node, const ClassData& d) const;
  TensorEGraph& owner_;
  const TensorType* pending_type_ = nullptr;  // the type add() already inferred
};

// Where a graph's named things went in the e-graph (from_graph) and how to rebuild them.
struct GraphRoots {
  std::vector<NodeId> sources;                      // input/parameter/state nodes, in order
  std::vector<std::pair<std::string, Id>> outputs;  // output name, class
  std::vector<std::pair<NodeId, Id>> assignments;   // target node (original graph), value
  std::vector<Id> node_class;                       // per original node: its class
  std::vector<Id> all() const;                      // outputs then assignment values
};

class TensorEGraph {
 public:
  TensorEGraph();
  TensorEGraph(const TensorEGraph&) = delete;
  TensorEGraph& operator=(const TensorEGraph&) = delete;

  egraph::EGraph& egraph() { return egraph_; }
  const egraph::EGraph& egraph() const { return egraph_; }
  const TensorAnalysis& analysis() const { return analysis_; }

  // Operator ids: one per op-table entry. op() throws mn::Error for an unknown name.
  OpId op(std::string_view name) const;
  std::optional<OpId> find_op(std::string_view name) const;
  const OpDef& op_def(OpId op) const { return *defs_.at(op); }
  size_t num_ops() const { return defs_.size(); }

  // Attribute words: equal Attrs get equal words; word 0 is NoAttrs (patterns default to 0).
  egraph::Attr intern(const Attrs& attrs) { return attrs_.intern(attrs); }
  const Attrs& attrs(egraph::Attr word) const { return attrs_.get(word); }
  template <class T>
  const T& attrs_as(egraph::Attr word) const {
    return attrs_.get(word).as<T>();
  }

  // Adds a node, inferring its type from the children's; throws mn::ShapeError (or mn::Error
  // for a wrong operand count) when it does not type-check.
  Id add(const OpDef& op, const Attrs& attrs, std::span<const Id> children);
  Id add(std::string_view op, const Attrs& attrs, std::span<const Id> children) {
    return add(*defs_.at(this->op(op)), attrs, children);
  }
  Id add(std::string_view op, const Attrs& attrs, std::initializer_list<Id> children) {
    return add(op, attrs, std::span<const Id>(children.begin(), children.size()));
  }
  // The same, but a node that does not type-check is a plain "no" (for rule appliers).
  std::optional<Id> try_add(const OpDef& op, const Attrs& attrs, std::span<const Id> children);
  std::optional<Id> try_add(std::string_view op, const Attrs& attrs,
                            std::initializer_list<Id> children) {
    return try_add(*defs_.at(this->op(op)), attrs,
                   std::span<const Id>(children.begin(), children.size()));
  }
  // try_add that also requires the result to have `type` (a rule's matched class type).
  std::optional<Id> try_add_typed(const OpDef& op, const Attrs& attrs, std::span<const Id> children,
                                  const TensorType& type);

  // A constant node. Values are kept as given (no rounding to the dtype): the reference computes
  // in double, and the compiled graph rounds constants when it stores them.
  Id constant(const Array& value);
  Id scalar(double value, DType dtype);

  const TensorType& type(Id id) const { return analysis_.data(id).type; }
  bool same_type(Id a, Id b) const { return type(a) == type(b); }
  // The class's known value (small constants only), or nullptr.
  const Array* constant(Id id) const { return analysis_.data(id).value.get(); }
  // The value every element of the class shares, when the analysis knows it (constants of any
  // size, and their broadcasts/views).
  std::optional<double> uniform_value(Id id) const { return analysis_.data(id).uniform; }

  // Graph -> e-graph: every node of `g` (dead ones too) becomes an e-node.
  GraphRoots add_graph(const Graph& g);
  // E-graph -> graph: the chosen nodes, with the original graph's sources (all of them, same
  // names, order, initializers), outputs and assignments. Types are re-inferred by Graph::apply
  // and each root must come back with its original type (mn::Error otherwise).
  Graph to_graph(const Graph& original, const GraphRoots& roots,
                 const egraph::Extraction& extraction) const;

  // Op ids the encoding itself uses.
  OpId input_op() const { return input_op_; }
  OpId parameter_op() const { return parameter_op_; }
  OpId state_op() const { return state_op_; }
  OpId constant_op() const { return constant_op_; }
  bool is_source(OpId op) const {
    return op == input_op_ || op == parameter_op_ || op == state_op_ || op == constant_op_;
  }

 private:
  friend class TensorAnalysis;
  struct AttrsHash {
    size_t operator()(const Attrs& a) const { return static_cast<size_t>(a.hash()); }
  };
  // The type of `op` over the children's types; nullopt when it does not type-check (and
  // `error`, when given, says why).
  std::optional<TensorType> infer(const OpDef& op, const Attrs& attrs, std::span<const Id> children,
                                  std::string* error) const;
  Id add_with_type(OpId op, egraph::Attr word, std::span<const Id> children,
                   const TensorType& type);

  std::vector<const OpDef*> defs_;       // by OpId
  std::vector<uint8_t> moves_elements_;  // by OpId: the op only moves/copies elements
  std::unordered_map<std::string_view, OpId> ids_;
  egraph::AttrTable<Attrs, AttrsHash> attrs_;
  OpId input_op_ = 0, parameter_op_ = 0, state_op_ = 0, constant_op_ = 0;
  TensorAnalysis analysis_;
  egraph::EGraph egraph_;
};

}  // namespace mn::optimize
