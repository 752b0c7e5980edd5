#pragma once
// Attribute recovery for recognition: a structural match of a composite's decomposition says
// which attribute words the e-graph has where the decomposition has its nodes (reduction axes,
// the eps or scale constant...). A recovery function turns them into the composite's candidate
// attributes. Candidates are only guesses: the rule keeps one only if the decomposition rebuilt
// with it is exactly the matched computation.
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

#include "egraph/pattern.h"
#include "optimize/rules_composite_template.h"
#include "optimize/tensor_egraph.h"

namespace mn::optimize::composite {

class MatchView {
 public:
  MatchView(const TensorEGraph& teg, const Expansion& tmpl, const Attrs& tmpl_attrs,
            std::span<const int32_t> attr_var, const egraph::Subst& subst,
            std::span<const TensorType> operand_types)
      : teg_(teg),
        tmpl_(tmpl),
        tmpl_attrs_(tmpl_attrs),
        attr_var_(attr_var),
        subst_(subst),
        operand_types_(operand_types) {}

  // The attributes the template was built with (those of one op sample).
  const Attrs& template_attrs() const { return tmpl_attrs_; }
  const std::vector<NodeId>& template_nodes() const { return tmpl_.order; }
  const Node& template_node(NodeId id) const { return tmpl_.graph.node(id); }
  // The first (in dependency order) template node of op `name`.
  std::optional<NodeId> first(std::string_view name) const;
  // The attributes the e-graph has at template node `id` (an operator node of the template).
  const Attrs& matched(NodeId id) const;
  // The value of the single-element constant matched at template node `id`, as the shortest
  // decimal that rounds to it in its dtype (a graph scalar holds eps = 1e-5 rounded to f32; the
  // attribute then reads 1e-5 again, as the user wrote it).
  std::optional<double> matched_scalar(NodeId id) const;
  // The template's single-element constant whose value is `v` (the first one), if any.
  std::optional<NodeId> template_scalar(double v) const;
  std::span<const TensorType> operand_types() const { return operand_types_; }

 private:
  const TensorEGraph& teg_;
  const Expansion& tmpl_;
  const Attrs& tmpl_attrs_;
  std::span<const int32_t> attr_var_;
  const egraph::Subst& subst_;
  std::span<const TensorType> operand_types_;
};

// The shortest decimal (fewest significant digits) that rounds to `v` in `dtype`.
double shortest_decimal(double v, DType dtype);

// Candidate attributes of a composite from a match.
using RecoverFn = std::function<std::vector<Attrs>(const MatchView&)>;

// More attributes to build templates with, beyond a sample's own: where the samples do not show
// every structure an op's attributes select on every operand layout (attention: causal and
// explicit-scale forms with and without a mask).
std::vector<Attrs> template_variants(std::string_view name, const Attrs& sample);

// The recovery for op `name`; nullptr when the op has none (its samples' attributes are then
// the only candidates, which serves ops whose attributes the structure alone decides).
RecoverFn attribute_recovery(std::string_view name);

}  // namespace mn::optimize::composite
