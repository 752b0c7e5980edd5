// cross_entropy, nll_loss and their backward ops as direct kernels. Scores [N, C, d...] are seen
// as rows b = o * inner + s (the batch shape in row-major order) whose class c sits at
// (o * C + c) * inner + s. A row's softmax statistics come from two passes over its scores (max,
// then the sum of exponentials with whatever else the loss sums), done by one thread for few
// classes or by one workgroup for many.
//
// Targets the reference rejects (outside [0, C) and not ignore_index): with index checks
// (LowerContext::check_indices) their rows are recorded in the node's index slot (the session
// raises mn::IndexError after the step, codegen/index_check.h) and left out like ignored rows,
// so the parameters an update writes stay finite; unchecked, their rows give NaN, so the loss
// shows them.
#include <algorithm>
#include <optional>

#include "codegen/glsl.h"
#include "codegen/index_check.h"
#include "codegen/lower_loss.h"
#include "ir/ops/loss.h"

namespace mn::codegen::loss_lowering {

namespace {

using CrossEntropyBackwardAttrs = LossBackwardAttrs<CrossEntropyAttrs>;

struct ClassGeometry {
  int64_t classes = 1, inner = 1, rows = 1;

  explicit ClassGeometry(const Shape& scores) {
    classes = scores.size() == 1 ? scores[0] : scores[1];
    const int64_t outer = scores.size() == 1 ? 1 : scores[0];
    for (size_t i = 2; i < scores.size(); ++i) inner *= scores[i];
    rows = outer * inner;
  }
  uint64_t elements() const { return static_cast<uint64_t>(rows * classes); }

  std::string glsl() const {
    return "const uint MN_C = " + std::to_string(classes) +
           "u;\nconst uint MN_INNER = " + std::to_string(inner) +
           "u;\nconst uint MN_ROWS = " + std::to_string(rows) +
           "u;\nuint row_base(uint b) { return (b / MN_INNER) * (MN_C * MN_INNER) + b % "
           "MN_INNER; }\n";
  }
};

// Who walks a row's classes: one thread (for few classes), or a workgroup of `local` threads,
// combining their partial results through the wg_* functions.
struct RowWalk {
  bool group = false;
  uint32_t local = 1;

  std::string loop() const {
    return group ? "for (uint c = gl_LocalInvocationID.x; c < MN_C; c += " + std::to_string(local) +
                       "u)"
                 : "for (uint c = 0u; c < MN_C; ++c)";
  }
  std::string combine_max(const std::string& v) const {
    return group ? "  " + v + " = wg_max(" + v + ");\n" : "";
  }
  std::string combine_sum(const std::string& v) const {
    return group ? "  " + v + " = wg_sum(" + v + ");\n" : "";
  }
};

// Many classes: a workgroup per row, unless there are so many rows with moderately many
// classes that a thread per row keeps the device busier.
bool group_per_row(const ClassGeometry& g) {
  return g.classes > 64 && !(g.rows >= 8192 && g.classes <= 512);
}

uint32_t group_local(const ClassGeometry& g, const DeviceTraits& d) {
  uint32_t local = 32;
  const uint32_t most = reduce_local(d);
  while (local < most && static_cast<int64_t>(local) * 8 < g.classes) local *= 2;
  return local;
}

// The row max m of row b's scores in buffer zs (row base in `base`), as statements.
std::string row_max(const RowWalk& w) {
  return "  float m = -mn_inf();\n  " + w.loop() +
         " { float z = zs_ld(base + c * MN_INNER); m = z > m ? z : m; }\n" + w.combine_max("m");
}

std::string one_minus_eps(double eps) { return glsl::float_literal(1.0 - eps); }
std::string eps_over_c(double eps, int64_t c) {
  return glsl::float_literal(eps / static_cast<double>(c));
}

// ---- cross_entropy ----

// `float item_loss(uint b)`: the loss of row b (the same value in every thread of a group).
std::string cross_entropy_row(const CrossEntropyAttrs& a, const ClassGeometry& g, bool probs,
                              const RowWalk& w, bool checked) {
  const double eps = a.label_smoothing;
  std::string s = "float item_loss(uint b) {\n";
  if (!probs) {
    s += "  int t = tgt_ldi(b);\n  if (ignored(t)) return 0.0;\n";
    s += checked ? "  if (bad_target(t)) { mn_bad_index(b, t); return 0.0; }\n"
                 : "  if (bad_target(t)) return mn_nan();\n";
  }
  s += "  uint base = row_base(b);\n" + row_max(w);
  // -log_softmax = (m - z) + lse: both terms are non-negative, so sums of them do not cancel.
  if (probs) {
    s += "  float se = 0.0, a = 0.0, tw = 0.0;\n  " + w.loop() +
         " {\n    uint e = base + c * MN_INNER;\n    float d = zs_ld(e) - m;\n";
    s += eps == 0.0 ? "    float tc = tgt_ld(e);\n"
                    : "    float tc = tgt_ld(e) * " + one_minus_eps(eps) + " + " +
                          eps_over_c(eps, g.classes) + ";\n";
    s += "    se += exp(d);\n    a -= tc * d;\n    tw += tc;\n  }\n";
    s += w.combine_sum("se") + w.combine_sum("a") + w.combine_sum("tw");
    s += "  return a + log(se) * tw;\n}\n";
    return s;
  }
  s += "  float se = 0.0, a = 0.0;\n  " + w.loop() +
       " {\n    float d = zs_ld(base + c * MN_INNER) - m;\n    se += exp(d);\n";
  if (eps != 0.0) s += "    a -= d;\n";
  s += "  }\n" + w.combine_sum("se") + (eps != 0.0 ? w.combine_sum("a") : "");
  s += "  float lse = log(se);\n";
  s += "  float loss = lse - (zs_ld(base + uint(t) * MN_INNER) - m);\n";
  if (eps != 0.0) {
    s += "  loss = " + one_minus_eps(eps) + " * loss + " + eps_over_c(eps, g.classes) +
         " * (a + float(MN_C) * lse);\n";
  }
  s += "  return loss;\n}\n";
  return s;
}

std::string class_inputs(const LowerContext& ctx, bool probs) {
  std::string s = glsl::buffer(0, ctx.inputs[0].dtype, "zs", true);
  s += probs ? glsl::buffer(1, ctx.inputs[1].dtype, "tgt", true)
             : glsl::buffer(1, DType::i32, "tgt", true);
  return s;
}

// The index check of class targets, node input `input`.
IndexCheck target_check(const ClassGeometry& g, int64_t ignore_index, int input = 1) {
  return {input, g.classes, "target value", "target",
          " and is not ignore_index (" + std::to_string(ignore_index) + ")"};
}

Lowering lower_cross_entropy(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<CrossEntropyAttrs>();
  const ClassGeometry g(ctx.inputs[0].shape);
  const bool probs = is_float(ctx.inputs[1].dtype);
  const bool checked = !probs && ctx.check_indices;
  std::string common = class_inputs(ctx, probs) + (checked ? index_slot_glsl(2) : "") + g.glsl() +
                       math_functions() + target_functions(a.ignore_index, g.classes, checked);
  ItemLosses items;
  items.inputs = {0, 1};
  items.index_slot = checked;
  items.items = static_cast<uint64_t>(g.rows);
  items.cost_per_item = static_cast<uint64_t>(2 * g.classes);
  items.counted = !probs;
  const std::string counted =
      probs ? "" : "bool item_counted(uint b) { return counted(tgt_ldi(b)); }\n";
  std::optional<IndexCheck> check;
  if (checked) check = target_check(g, a.ignore_index);
  if (!group_per_row(g)) {
    items.declarations = common + counted + cross_entropy_row(a, g, probs, RowWalk{}, checked);
    Lowering l = lower_item_losses(ctx, items, a.reduction);
    l.index_check = check;
    return l;
  }
  items.declarations = common + counted;
  const RowWalk walk{true, group_local(g, ctx.device)};
  items.item_kernel = [&ctx, &a, &items, g, probs, checked, common, walk](ArgRef dest,
                                                                          DType dtype) {
    KernelLaunch k;
    k.name = "cross_entropy_rows";
    k.workgroup = {walk.local, 1, 1};
    k.groups = glsl::linear_grid(static_cast<uint64_t>(g.rows) * walk.local, ctx.device, walk.local)
                   .groups;
    k.bindings = items.leading_bindings();
    k.bindings.push_back({dest, true});
    k.glsl = glsl::header() + common +
             dest_buffer(static_cast<uint32_t>(k.bindings.size() - 1), dtype) +
             workgroup_functions(walk.local) + cross_entropy_row(a, g, probs, walk, checked) +
             "void main() {\n  uint b = gl_WorkGroupID.y * gl_NumWorkGroups.x + "
             "gl_WorkGroupID.x;\n  if (b >= MN_ROWS) return;\n  float v = item_loss(b);\n"
             "  if (gl_LocalInvocationID.x == 0u) dst_st(b, v);\n}\n";
    return k;
  };
  Lowering l = lower_item_losses(ctx, items, a.reduction);
  l.index_check = check;
  return l;
}

// `void grad_row(uint b, float count)`: row b of the gradient, w.r.t. the logits (wrt = 0):
// w (T softmax - t'), or the probability target (wrt = 1): -w (1 - e) log_softmax, where w is
// the row's cotangent (over `count` for the mean), t' the smoothed target and T its sum.
std::string cross_entropy_grad_row(const CrossEntropyBackwardAttrs& ba, const ClassGeometry& g,
                                   bool probs, const RowWalk& w, bool checked) {
  const CrossEntropyAttrs& a = ba.forward;
  const double eps = a.label_smoothing;
  const std::string smooth = eps_over_c(eps, g.classes);
  std::string s = "void grad_row(uint b, float count) {\n  uint base = row_base(b);\n";
  s += std::string("  float w = ct_ld(") + (a.reduction == Reduction::none ? "b" : "0u") + ");\n";
  if (a.reduction == Reduction::mean) s += "  w = w / count;\n";
  if (!probs) {
    s += "  int t = tgt_ldi(b);\n";
    // Checked, a bad target's row is left out like an ignored one once recorded.
    s += checked ? "  if (bad_target(t)) mn_bad_index(b, t);\n  if (!counted(t)) {\n"
                 : "  if (ignored(t)) {\n";
    s += "    " + w.loop() + " out_st(base + c * MN_INNER, 0.0);\n    return;\n  }\n";
    if (!checked) s += "  if (bad_target(t)) w = mn_nan();\n";
  }
  s += row_max(w);
  const bool total = probs && ba.wrt == 0;
  s += "  float se = 0.0, tot = 0.0;\n  " + w.loop() +
       " {\n    uint e = base + c * MN_INNER;\n    se += exp(zs_ld(e) - m);\n";
  if (total) s += "    tot += tgt_ld(e) * " + one_minus_eps(eps) + " + " + smooth + ";\n";
  s += "  }\n" + w.combine_sum("se") + (total ? w.combine_sum("tot") : "");
  s += "  float lse = log(se);\n";
  if (ba.wrt == 1) {
    s += "  float wn = -w * " + one_minus_eps(eps) + ";\n  " + w.loop() +
         " {\n    uint e = base + c * MN_INNER;\n    out_st(e, wn * ((zs_ld(e) - m) - lse));\n  "
         "}\n}\n";
    return s;
  }
  s += "  " + w.loop() + " {\n    uint e = base + c * MN_INNER;\n";
  if (probs) {
    s += "    float sm = tgt_ld(e) * " + one_minus_eps(eps) + " + " + smooth + ";\n";
    s += "    out_st(e, w * (tot * exp((zs_ld(e) - m) - lse) - sm));\n";
  } else {
    // The smoothed one-hot target sums to 1 exactly.
    s += "    float sm = (int(c) == t ? " + one_minus_eps(eps) + " : 0.0) + " + smooth + ";\n";
    s += "    out_st(e, w * (exp((zs_ld(e) - m) - lse) - sm));\n";
  }
  s += "  }\n}\n";
  return s;
}

Lowering lower_cross_entropy_backward(const LowerContext& ctx) {
  const auto& ba = ctx.node.attrs.as<CrossEntropyBackwardAttrs>();
  const CrossEntropyAttrs& a = ba.forward;
  const ClassGeometry g(ctx.inputs[0].shape);
  const bool probs = is_float(ctx.inputs[1].dtype);
  const bool checked = !probs && ctx.check_indices;
  const std::string targets = target_functions(a.ignore_index, g.classes, checked);
  // Index targets' mean divides by the number of rows counted: a count over the batch.
  const bool needs_count = a.reduction == Reduction::mean && !probs;
  const bool group = group_per_row(g);
  const bool fused = needs_count && !group && g.elements() * 3 <= (1u << 16);
  const uint32_t rl = reduce_local(ctx.device);
  const RowWalk walk = group ? RowWalk{true, group_local(g, ctx.device)} : RowWalk{};

  std::string src =
      glsl::header() + class_inputs(ctx, probs) + glsl::buffer(2, ctx.inputs[2].dtype, "ct", true) +
      glsl::buffer(3, ctx.node.type.dtype, "out", false) + g.glsl() + math_functions() + targets;
  KernelLaunch k;
  k.name = "cross_entropy_backward";
  k.bindings = {{ArgRef::input(0), false},
                {ArgRef::input(1), false},
                {ArgRef::input(2), false},
                {ArgRef::output(), true}};
  Lowering l;
  std::string count = needs_count
                          ? "cnt_ld(0u)"
                          : glsl::float_literal(static_cast<double>(std::max<int64_t>(g.rows, 1)));
  if (needs_count && !fused) {
    l.scratch_bytes.push_back(sizeof(float));
    l.launches.push_back(
        count_kernel(ctx, 1, static_cast<uint64_t>(g.rows), targets, ArgRef::scratch(0)));
    src += glsl::buffer(4, DType::f32, "cnt", true);
    k.bindings.push_back({ArgRef::scratch(0), false});
  }
  if (checked) {
    src += index_slot_glsl(static_cast<uint32_t>(k.bindings.size()));
    k.bindings.push_back(index_slot_binding());
    l.index_check = target_check(g, a.ignore_index);
  }
  if (fused) {
    src += workgroup_functions(rl) + cross_entropy_grad_row(ba, g, probs, walk, checked);
    src += "void main() {\n  uint lid = gl_LocalInvocationID.x;\n  uint cnt = 0u;\n";
    src += "  for (uint b = lid; b < MN_ROWS; b += " + std::to_string(rl) +
           "u) if (counted(tgt_ldi(b))) ++cnt;\n";
    src += "  float count = float(wg_count(cnt));\n";
    src += "  for (uint b = lid; b < MN_ROWS; b += " + std::to_string(rl) +
           "u) grad_row(b, count);\n}\n";
    k.workgroup = {rl, 1, 1};
  } else if (group) {
    src += workgroup_functions(walk.local) + cross_entropy_grad_row(ba, g, probs, walk, checked);
    src +=
        "void main() {\n  uint b = gl_WorkGroupID.y * gl_NumWorkGroups.x + "
        "gl_WorkGroupID.x;\n  if (b >= MN_ROWS) return;\n  grad_row(b, " +
        count + ");\n}\n";
    k.workgroup = {walk.local, 1, 1};
    k.groups = glsl::linear_grid(static_cast<uint64_t>(g.rows) * walk.local, ctx.device, walk.local)
                   .groups;
  } else {
    src += glsl::gid_function() + cross_entropy_grad_row(ba, g, probs, walk, checked);
    src += "void main() {\n  uint b = gid();\n  if (b >= MN_ROWS) return;\n  grad_row(b, " + count +
           ");\n}\n";
    auto grid = glsl::linear_grid(static_cast<uint64_t>(g.rows), ctx.device, 64);
    k.workgroup = {grid.local, 1, 1};
    k.groups = grid.groups;
  }
  k.glsl = std::move(src);
  l.launches.push_back(std::move(k));
  return l;
}

// ---- nll_loss ----

Lowering lower_nll_loss(const LowerContext& ctx) {
  const auto& a = ctx.node.attrs.as<NllLossAttrs>();
  const ClassGeometry g(ctx.inputs[0].shape);
  const bool checked = ctx.check_indices;
  ItemLosses items;
  items.inputs = {0, 1};
  items.index_slot = checked;
  items.items = static_cast<uint64_t>(g.rows);
  items.counted = true;
  items.declarations = glsl::buffer(0, ctx.inputs[0].dtype, "xs", true) +
                       glsl::buffer(1, DType::i32, "tgt", true) +
                       (checked ? index_slot_glsl(2) : "") + g.glsl() + math_functions() +
                       target_functions(a.ignore_index, g.classes, checked) +
                       "bool item_counted(uint b) { return counted(tgt_ldi(b)); }\n"
                       "float item_loss(uint b) {\n  int t = tgt_ldi(b);\n"
                       "  if (ignored(t)) return 0.0;\n";
  items.declarations += checked ? "  if (bad_target(t)) { mn_bad_index(b, t); return 0.0; }\n"
                                : "  if (bad_target(t)) return mn_nan();\n";
  items.declarations += "  return -xs_ld(row_base(b) + uint(t) * MN_INNER);\n}\n";
  Lowering l = lower_item_losses(ctx, items, a.reduction);
  if (checked) l.index_check = target_check(g, a.ignore_index);
  return l;
}

// Element e of the gradient: -w at its row's target class, 0 elsewhere and in ignored rows.
Lowering lower_nll_loss_backward(const LowerContext& ctx) {
  const auto& ba = ctx.node.attrs.as<NllLossBackwardAttrs>();
  const NllLossAttrs& a = ba.forward;
  const ClassGeometry g(ctx.node.type.shape);
  const uint64_t n = g.elements();
  const bool needs_count = a.reduction == Reduction::mean;
  const bool fused = needs_count && n <= (1u << 16);
  const uint32_t rl = reduce_local(ctx.device);
  const bool checked = ctx.check_indices;
  const std::string targets = target_functions(a.ignore_index, g.classes, checked);

  // Bindings: targets, cotangent, output, then the count (unfused mean) and the index slot.
  KernelLaunch k;
  k.name = "nll_loss_backward";
  k.bindings = {{ArgRef::input(0), false}, {ArgRef::input(1), false}, {ArgRef::output(), true}};
  Lowering l;
  std::string src = glsl::header() + glsl::buffer(0, DType::i32, "tgt", true) +
                    glsl::buffer(1, ctx.inputs[1].dtype, "ct", true) +
                    glsl::buffer(2, ctx.node.type.dtype, "out", false) + g.glsl() +
                    math_functions() + targets;
  std::string count = "1.0";
  if (needs_count && !fused) {
    l.scratch_bytes.push_back(sizeof(float));
    l.launches.push_back(
        count_kernel(ctx, 0, static_cast<uint64_t>(g.rows), targets, ArgRef::scratch(0)));
    src += glsl::buffer(3, DType::f32, "cnt", true);
    k.bindings.push_back({ArgRef::scratch(0), false});
    count = "cnt_ld(0u)";
  }
  if (checked) {
    src += index_slot_glsl(static_cast<uint32_t>(k.bindings.size()));
    k.bindings.push_back(index_slot_binding());
    l.index_check = target_check(g, a.ignore_index, 0);
  }
  src += "void grad_at(uint e, float count) {\n";
  src += "  uint q = e / MN_INNER;\n  uint c = q % MN_C;\n";
  src += "  uint b = (q / MN_C) * MN_INNER + e % MN_INNER;\n";
  src += "  int t = tgt_ldi(b);\n  float v = 0.0;\n";
  if (checked) {  // recorded once per row, and left out
    src += "  if (bad_target(t) && c == 0u) mn_bad_index(b, t);\n";
    src += "  if (counted(t) && uint(t) == c) v = -(ct_ld(";
  } else {
    src += "  if (bad_target(t)) v = mn_nan();\n";
    src += "  else if (!ignored(t) && uint(t) == c) v = -(ct_ld(";
  }
  src += std::string(a.reduction == Reduction::none ? "b" : "0u") + ")" +
         (needs_count ? " / count" : "") + ");\n  out_st(e, v);\n}\n";
  if (fused) {
    src += workgroup_functions(rl);
    src += "void main() {\n  uint lid = gl_LocalInvocationID.x;\n  uint cnt = 0u;\n";
    src += "  for (uint b = lid; b < MN_ROWS; b += " + std::to_string(rl) +
           "u) if (counted(tgt_ldi(b))) ++cnt;\n";
    src += "  float count = float(wg_count(cnt));\n";
    src += "  for (uint e = lid; e < " + std::to_string(n) + "u; e += " + std::to_string(rl) +
           "u) grad_at(e, count);\n}\n";
    k.workgroup = {rl, 1, 1};
  } else {
    src += glsl::gid_function() +
           "void main() {\n  uint e = gid();\n  if (e >= " + std::to_string(n) +
           "u) return;\n  grad_at(e, " + count + ");\n}\n";
    auto grid = glsl::linear_grid(n, ctx.device);
    k.workgroup = {grid.local, 1, 1};
    k.groups = grid.groups;
  }
  k.glsl = std::move(src);
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace

void register_class_loss_lowerings(LoweringRegistry& r) {
  r.add("cross_entropy", lower_cross_entropy);
  r.add("cross_entropy_backward", lower_cross_entropy_backward);
  r.add("nll_loss", lower_nll_loss);
  r.add("nll_loss_backward", lower_nll_loss_backward);
}

}  // namespace mn::codegen::loss_lowering
