#include "optimize/rules_composite_attrs.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "ir/ops/attention.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"

namespace mn::optimize::composite {

std::optional<NodeId> MatchView::first(std::string_view name) const {
  for (NodeId id : tmpl_.order)
    if (tmpl_.graph.node(id).op_name() == name) return id;
  return std::nullopt;
}

const Attrs& MatchView::matched(NodeId id) const {
  const int32_t v = attr_var_[static_cast<size_t>(id)];
  if (v < 0) throw Error("composite rules: template node %" + std::to_string(id) + " is unmatched");
  return teg_.attrs(subst_[egraph::AttrVar{static_cast<uint32_t>(v)}]);
}

std::optional<double> MatchView::matched_scalar(NodeId id) const {
  const Attrs& a = matched(id);
  if (!a.is<ConstantAttrs>()) return std::nullopt;
  const auto& arr = a.as<ConstantAttrs>().value.array;
  if (!arr || arr->numel() != 1) return std::nullopt;
  return shortest_decimal(arr->data[0], arr->dtype);
}

double shortest_decimal(double v, DType dtype) {
  if (!std::isfinite(v)) return v;
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    const double d = std::strtod(buf, nullptr);
    if (round_to_dtype(d, dtype) == v) return d;
  }
  return v;
}

std::optional<NodeId> MatchView::template_scalar(double v) const {
  for (NodeId id : tmpl_.order) {
    const Node& n = tmpl_.graph.node(id);
    if (n.op_name() != "constant") continue;
    const auto& arr = n.attrs.as<ConstantAttrs>().value.array;
    if (arr && arr->numel() == 1 &&
        (arr->data[0] == v || arr->data[0] == round_to_dtype(v, arr->dtype)))
      return id;
  }
  return std::nullopt;
}

namespace {

const std::vector<int64_t>* reduce_axes_at(const MatchView& v, std::string_view op) {
  auto id = v.first(op);
  if (!id) return nullptr;
  const Attrs& a = v.matched(*id);
  return a.is<ReduceAttrs>() ? &a.as<ReduceAttrs>().axes : nullptr;
}

// The softmaxes reduce (max, then sum) along their one axis.
std::vector<Attrs> recover_softmax(const MatchView& v) {
  const auto* axes = reduce_axes_at(v, "max");
  if (!axes || axes->size() != 1) return {};
  return {SoftmaxAttrs{(*axes)[0]}};
}

// The norms: normalized_dims is the number of axes the (first) mean reduces, eps the value of
// the one scalar constant added to the mean square (or variance).
std::optional<std::pair<int64_t, double>> norm_dims_eps(const MatchView& v) {
  const auto* axes = reduce_axes_at(v, "mean");
  auto eps_node = v.first("constant");
  if (!axes || axes->empty() || !eps_node) return std::nullopt;
  auto eps = v.matched_scalar(*eps_node);
  if (!eps) return std::nullopt;
  return std::pair{static_cast<int64_t>(axes->size()), *eps};
}

std::vector<Attrs> recover_rms_norm(const MatchView& v) {
  auto de = norm_dims_eps(v);
  if (!de) return {};
  RmsNormAttrs a = v.template_attrs().as<RmsNormAttrs>();
  a.normalized_dims = de->first;
  a.eps = de->second;
  return {a};
}

std::vector<Attrs> recover_layer_norm(const MatchView& v) {
  auto de = norm_dims_eps(v);
  if (!de) return {};
  LayerNormAttrs a = v.template_attrs().as<LayerNormAttrs>();
  a.normalized_dims = de->first;
  a.eps = de->second;
  return {a};
}

// Causal masking and the mask operand show in the structure; an explicit scale is the constant
// the scores are multiplied by (the default scale divides by sqrt(D) instead).
std::vector<Attrs> recover_attention(const MatchView& v) {
  AttentionAttrs a = v.template_attrs().as<AttentionAttrs>();
  if (a.scale > 0.0) {
    auto at = v.template_scalar(a.scale);
    if (!at) return {};
    auto s = v.matched_scalar(*at);
    if (!s || !(*s > 0.0) || !std::isfinite(*s)) return {};
    a.scale = *s;
  }
  return {a};
}

// mean = sum / count: the sum carries the axes and keepdims.
std::vector<Attrs> recover_mean(const MatchView& v) {
  auto id = v.first("sum");
  if (!id) return {};
  const Attrs& a = v.matched(*id);
  if (!a.is<ReduceAttrs>()) return {};
  return {a};
}

// variance = sum((x - mean(x))^2, axes, keepdims) / (count - correction).
std::vector<Attrs> recover_variance(const MatchView& v) {
  auto id = v.first("sum");
  if (!id || v.operand_types().empty()) return {};
  const Attrs& a = v.matched(*id);
  if (!a.is<ReduceAttrs>()) return {};
  const auto& r = a.as<ReduceAttrs>();
  std::optional<double> denom;
  for (NodeId n : v.template_nodes()) {
    if (v.template_node(n).op_name() == "constant") denom = v.matched_scalar(n);
  }
  if (!denom) return {};
  int64_t count = 1;
  const Shape& shape = v.operand_types()[0].shape;
  for (int64_t axis : r.axes) {
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size())) return {};
    count *= shape[static_cast<size_t>(axis)];
  }
  const double correction = static_cast<double>(count) - *denom;
  if (correction != std::floor(correction)) return {};
  return {VarianceAttrs{r.axes, r.keepdims, static_cast<int64_t>(correction)}};
}

// rope: theta is the base of the pow, the offset the first position of the constant the
// angles are built from (angle = positions * inv_freq, the operand of cos).
std::vector<Attrs> recover_rope(const MatchView& v) {
  auto pow_node = v.first("pow");
  auto cos_node = v.first("cos");
  if (!pow_node || !cos_node) return {};
  const NodeId theta_node = v.template_node(*pow_node).inputs[0];
  const NodeId angle = v.template_node(*cos_node).inputs[0];
  if (v.template_node(angle).inputs.empty()) return {};
  const NodeId positions = v.template_node(angle).inputs[0];
  if (v.template_node(theta_node).op_name() != "constant" ||
      v.template_node(positions).op_name() != "constant") {
    return {};
  }
  auto theta = v.matched_scalar(theta_node);
  const Attrs& p = v.matched(positions);
  if (!theta || !p.is<ConstantAttrs>()) return {};
  const auto& arr = p.as<ConstantAttrs>().value.array;
  if (!arr || arr->numel() == 0) return {};
  const double offset = arr->data[0];
  if (offset != std::floor(offset)) return {};
  return {RopeAttrs{*theta, static_cast<int64_t>(offset)}};
}

}  // namespace

std::vector<Attrs> template_variants(std::string_view name, const Attrs& sample) {
  std::vector<Attrs> out;
  if (name == "scaled_dot_product_attention") {
    const auto& a = sample.as<AttentionAttrs>();
    for (bool causal : {false, true}) {
      for (double scale : {0.0, 0.5}) {
        if (causal != a.causal || (scale > 0.0) != (a.scale > 0.0))
          out.emplace_back(AttentionAttrs{causal, scale, a.has_mask});
      }
    }
  }
  return out;
}

RecoverFn attribute_recovery(std::string_view name) {
  static const std::unordered_map<std::string_view, RecoverFn> table{
      {"softmax", recover_softmax},
      {"log_softmax", recover_softmax},
      {"rms_norm", recover_rms_norm},
      {"layer_norm", recover_layer_norm},
      {"scaled_dot_product_attention", recover_attention},
      {"mean", recover_mean},
      {"variance", recover_variance},
      {"rope", recover_rope},
      {"rope_backward", recover_rope},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace mn::optimize::composite
