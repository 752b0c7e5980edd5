// The training forms of scaled_dot_product_attention: the log-sum-exp of each query row's
// scores (attention_lse) and the gradients of q, k and v computed from it (attention_grad_q,
// attention_grad_k, attention_grad_v), as flash attention's backward pass does. Each
// probability is recomputed where it is used, P_ij = exp(S_ij - lse_i), so no Lq x Lk tensor
// exists; D_i = rowsum(dO_i * O_i) is computed first by a graph reduction and passed in.
//
//   dV_j = sum_i P_ij dO_i                      dS_ij = P_ij (dO_i . v_j - D_i)
//   dQ_i = scale sum_j dS_ij k_j                dK_j  = scale sum_i dS_ij q_i
//
// with the sums over i running over every query head of k and v's group. Each op takes only the
// operands its formulas read (the e-graph recognizes a decomposition by them): attention_lse(q,
// k[, mask]), attention_grad_v(q, k, dout, lse[, mask]), attention_grad_q and attention_grad_k(q,
// k, v, dout, lse, delta[, mask]), all with scaled_dot_product_attention's attributes. q, k, v must share their leading axes (a
// broadcast operand's gradient sums over its copies; the graph-op form handles that case).
//
// Their decompositions are the same formulas in graph ops (the e-graph holds both forms and the
// cost model chooses), and their backward passes differentiate those decompositions.
#include <algorithm>
#include <cmath>
#include <limits>

#include <meganeura/autodiff.h>

#include "ir/op_def.h"
#include "ir/ops/attention_internal.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"
#include "ir/ops/nn_util.h"

namespace mn {

namespace ops {
namespace {

enum class Form { lse, grad_q, grad_k, grad_v };
constexpr std::string_view op_name(Form f) {
  return f == Form::lse      ? "attention_lse"
         : f == Form::grad_q ? "attention_grad_q"
         : f == Form::grad_k ? "attention_grad_k"
                             : "attention_grad_v";
}

// Where each operand of a form sits (-1: not an operand), q and k being 0 and 1; the mask,
// when there is one, comes after `count`.
struct Operands {
  int v = -1, dout = -1, lse = -1, delta = -1;
  size_t count = 2;
  const char* names = "q, k";
};
Operands operands_of(Form f) {
  if (f == Form::lse) return {};
  if (f == Form::grad_v) return {-1, 2, 3, -1, 4, "q, k, dout, lse"};
  return {2, 3, 4, 5, 6, "q, k, v, dout, lse, delta"};
}

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 3); }

// v's type where v is no operand: k's with dout's last axis (grad_v), or k's (lse, where the
// values' width plays no part).
TensorType v_type(std::span<const TensorType> in, const Operands& o) {
  if (o.v >= 0) return in[static_cast<size_t>(o.v)];
  TensorType v = in[1];
  if (o.dout >= 0 && !v.shape.empty() && in[static_cast<size_t>(o.dout)].rank() >= 1) {
    v.shape.back() = in[static_cast<size_t>(o.dout)].shape.back();
  }
  return v;
}

// The dtype of the per-row statistics the backward reads (lse, delta): f32 for 16-bit
// operands, whose rounding of a log-sum-exp near 5 (up to 2^-9 · 8) would put every
// probability recomputed from it off by as much, relatively; the operands' own otherwise.
DType row_stat_dtype(DType operands) {
  return operands == DType::f16 || operands == DType::bf16 ? DType::f32 : operands;
}

AttentionGeometry training_geometry(Form form, std::span<const TensorType> in,
                                    const AttentionAttrs& a) {
  const std::string_view op = op_name(form);
  const Operands o = operands_of(form);
  if (in.size() != o.count + (a.has_mask ? 1 : 0)) {
    shape_fail(op, in, std::string("operands ") + o.names + (a.has_mask ? ", mask" : ""));
  }
  // q, k, v, dout and the mask of one float dtype; lse and delta of it or f32 (what the vjp
  // makes for 16-bit operands, row_stat_dtype).
  std::vector<TensorType> same;
  for (size_t i = 0; i < in.size(); ++i) {
    const int at = static_cast<int>(i);
    if (at == o.lse || at == o.delta) {
      const DType t = in[i].dtype;
      if (t != DType::f32 && t != in[0].dtype) {
        shape_fail(op, in, "lse and delta of q's dtype or f32");
      }
    } else {
      same.push_back(in[i]);
    }
  }
  require_same_float(op, same);
  std::vector<TensorType> qkv{in[0], in[1], v_type(in, o)};
  if (a.has_mask) qkv.push_back(in.back());
  const AttentionGeometry g = attention_geometry(qkv, a, op);
  if (!attention_training_applies(g)) {
    shape_fail(op, in, "q, k, v with the same leading (batch) axes");
  }
  if (o.dout >= 0 && in[static_cast<size_t>(o.dout)].shape != g.out) {
    shape_fail(op, in, "dout of the output's shape " + shape_str(g.out));
  }
  const Shape rows = g.rows();
  for (int i : {o.lse, o.delta}) {
    if (i >= 0 && in[static_cast<size_t>(i)].shape != rows) {
      shape_fail(op, in,
                 std::string(o.delta >= 0 ? "lse and delta" : "lse") + " of shape " +
                     shape_str(rows) + " (one per query row)");
    }
  }
  return g;
}

AttentionGeometry geometry_of_node(const Node& n, std::span<const Array* const> in, Form form) {
  std::vector<TensorType> types;
  for (const Array* x : in) types.push_back(x->type());
  return training_geometry(form, types, n.attrs.as<AttentionAttrs>());
}

// Visits every score a query sees, head by head: f(bh, hk, i, j, s) with bh the flat (batch,
// query head) index, hk the key/value head of batch b (b * Hkv + h / G) and s the scaled,
// masked score (-inf where the mask says so).
template <class F>
void for_each_score(const AttentionGeometry& g, const AttentionAttrs& a, double scale,
                    const double* q, const double* k, const double* mask, F&& f) {
  const int R = g.rank;
  const std::vector<int64_t> ms =
      mask ? broadcast_strides(g.mask, g.scores) : std::vector<int64_t>(static_cast<size_t>(R), 0);
  const Shape batch = g.batch;
  const int64_t batches = numel(batch);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t mask_batch = 0;  // the mask's offset of batch b
    for (int64_t d = R - 4, rest = b; d >= 0; --d) {
      mask_batch += (rest % batch[static_cast<size_t>(d)]) * ms[static_cast<size_t>(d)];
      rest /= batch[static_cast<size_t>(d)];
    }
    for (int64_t h = 0; h < g.hq; ++h) {
      const int64_t bh = b * g.hq + h, hk = b * g.hkv + h / g.group();
      for (int64_t i = 0; i < g.lq; ++i) {
        const double* qi = q + (bh * g.lq + i) * g.d;
        const int64_t visible = a.causal ? std::min(g.lk, i + 1) : g.lk;
        for (int64_t j = 0; j < visible; ++j) {
          const double* kj = k + (hk * g.lk + j) * g.d;
          double s = 0.0;
          for (int64_t e = 0; e < g.d; ++e) s += qi[e] * kj[e];
          s = attention_scaled(s, scale, g.d);
          if (mask) s += mask[mask_batch + h * ms[R - 3] + i * ms[R - 2] + j * ms[R - 1]];
          f(bh, hk, i, j, s);
        }
      }
    }
  }
}

// An explicit scale as the dtype holds it, like the graph scalar of the decompositions.
double node_scale(const Node& n) {
  const double scale = n.attrs.as<AttentionAttrs>().scale;
  return scale > 0.0 ? round_to_dtype(scale, n.type.dtype) : 0.0;
}

Array eval_lse(const Node& n, std::span<const Array* const> in) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_node(n, in, Form::lse);
  const double* mask = a.has_mask ? in.back()->data.data() : nullptr;
  const int64_t rows = numel(g.rows());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> m(static_cast<size_t>(rows), -inf), total(static_cast<size_t>(rows), 0.0);
  // Two passes: the row maxima, then the sums of exp(s - max) (NaN scores propagate).
  for (int pass = 0; pass < 2; ++pass) {
    for_each_score(g, a, node_scale(n), in[0]->data.data(), in[1]->data.data(), mask,
                   [&](int64_t bh, int64_t, int64_t i, int64_t, double s) {
                     const auto r = static_cast<size_t>(bh * g.lq + i);
                     if (pass == 0) {
                       m[r] = std::isnan(s) || s > m[r] ? s : m[r];
                     } else if (s != -inf) {
                       total[r] += std::exp(s - m[r]);
                     }
                   });
  }
  Array out(n.type.shape, n.type.dtype);
  for (size_t r = 0; r < m.size(); ++r) {
    out.data[r] = m[r] == -inf ? -inf : m[r] + std::log(total[r]);
  }
  return out;
}

Array eval_grad(const Node& n, std::span<const Array* const> in, Form form) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_node(n, in, form);
  const Operands o = operands_of(form);
  const auto operand = [&](int i) {
    return i >= 0 ? in[static_cast<size_t>(i)]->data.data() : nullptr;
  };
  const double* q = in[0]->data.data();
  const double* k = in[1]->data.data();
  const double* v = operand(o.v);
  const double* dout = operand(o.dout);
  const double* lse = operand(o.lse);
  const double* delta = operand(o.delta);
  const double* mask = a.has_mask ? in.back()->data.data() : nullptr;
  Array out(n.type.shape, n.type.dtype);
  double* grad = out.data.data();
  const double inf = std::numeric_limits<double>::infinity();
  for_each_score(g, a, node_scale(n), q, k, mask,
                 [&](int64_t bh, int64_t hk, int64_t i, int64_t j, double s) {
                   if (s == -inf) return;  // a masked key weighs nothing
                   const int64_t row = bh * g.lq + i, key = hk * g.lk + j;
                   const double p = std::exp(s - lse[row]);
                   const double* doi = dout + row * g.dv;
                   if (form == Form::grad_v) {
                     for (int64_t e = 0; e < g.dv; ++e) grad[key * g.dv + e] += p * doi[e];
                     return;
                   }
                   double dp = 0.0;
                   for (int64_t e = 0; e < g.dv; ++e) dp += doi[e] * v[key * g.dv + e];
                   const double ds = p * (dp - delta[row]);
                   if (form == Form::grad_q) {
                     for (int64_t e = 0; e < g.d; ++e) grad[row * g.d + e] += ds * k[key * g.d + e];
                   } else {
                     for (int64_t e = 0; e < g.d; ++e) grad[key * g.d + e] += ds * q[row * g.d + e];
                   }
                 });
  if (form != Form::grad_v) {
    const double scale = node_scale(n);
    for (double& x : out.data) x = attention_scaled(x, scale, g.d);
  }
  return out;
}

// ---- graph-op forms ----

// q, k, v[, mask] for the grouped layout; k stands in for v where v is no operand (only q's
// and k's grouped forms are used then).
std::vector<Tensor> qkv_mask_of(std::span<const Tensor> in, const AttentionAttrs& a, Form form) {
  const int v = operands_of(form).v;
  std::vector<Tensor> r{in[0], in[1], in[v >= 0 ? static_cast<size_t>(v) : 1]};
  if (a.has_mask) r.push_back(in.back());
  return r;
}
AttentionGeometry geometry_of_tensors(Form form, std::span<const Tensor> in,
                                      const AttentionAttrs& a) {
  std::vector<TensorType> types;
  for (const Tensor& t : in) types.push_back(t.type());
  return training_geometry(form, types, a);
}
// A per-row tensor [..rows] in the grouped layout, [..., Hkv, G, Lq, 1].
Tensor grouped_rows(const AttentionGeometry& g, Tensor x) {
  Shape s = g.batch;
  s.insert(s.end(), {g.hkv, g.group(), g.lq, 1});
  return reshape(x, s);
}

Tensor lse_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_tensors(Form::lse, in, a);
  const std::vector<Tensor> qkv = qkv_mask_of(in, a, Form::lse);
  Tensor s = attention_scores(g, attention_grouped(g, qkv, a.has_mask), a);
  Tensor m = max(s, {-1}, true);
  Tensor lse = reshape(log(sum(exp(s - m), {-1}, true)) + m, g.rows());
  return lse.dtype() == n.type.dtype ? lse : cast(lse, n.type.dtype);
}

// A per-row operand (lse, delta) in the scores' dtype, as the decompositions compute.
Tensor in_dtype_of(Tensor x, const Tensor& like) {
  return x.dtype() == like.dtype() ? x : cast(x, like.dtype());
}

Tensor grad_decompose(const Node& n, std::span<const Tensor> in, Form form) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_tensors(form, in, a);
  const Operands o = operands_of(form);
  // Where v is no operand, k stands in for it in the grouped layout (its grouped form unused).
  AttentionGeometry layout = g;
  if (o.v < 0) layout.v = g.k, layout.dv = g.d;
  const AttentionGrouped t = attention_grouped(layout, qkv_mask_of(in, a, form), a.has_mask);
  // Masked scores are -inf and so is their exp(s - lse): p = 0 there.
  Tensor p = exp(attention_scores(g, t, a) -
                 grouped_rows(g, in_dtype_of(in[static_cast<size_t>(o.lse)], in[0])));
  Shape grouped_out = g.batch;
  grouped_out.insert(grouped_out.end(), {g.hkv, g.group(), g.lq, g.dv});
  Tensor d_o = reshape(in[static_cast<size_t>(o.dout)], grouped_out);
  Tensor grouped_grad;
  Shape grouped_shape, shape;  // the gradient grouped ([..., Hkv, G or 1, L, *]) and not
  if (form == Form::grad_v) {
    grouped_grad = matmul(p, d_o, true, false);
    grouped_shape = t.k.shape();
    grouped_shape.back() = g.dv;
    shape = in[1].shape();
    shape.back() = g.dv;
  } else {
    Tensor delta = grouped_rows(g, in_dtype_of(in[static_cast<size_t>(o.delta)], in[0]));
    Tensor ds = p * (matmul(d_o, t.v, false, true) - delta);
    Tensor dss = attention_scaled(ds, a.scale, g.d);
    const bool dq = form == Form::grad_q;
    grouped_grad = dq ? matmul(dss, t.k) : matmul(dss, t.q, true, false);
    grouped_shape = dq ? t.q.shape() : t.k.shape();
    shape = in[dq ? 0 : 1].shape();
  }
  return reshape(sum_to(grouped_grad, grouped_shape), shape);
}

// The backward pass of a training op: its decomposition differentiated. Each operand is first
// passed through a fresh node so that the gradients are partial derivatives (delta is computed
// from dout, for one), and stop at the operands.
std::vector<Tensor> vjp_by_decomposition(const Node& n, std::span<const Tensor> in, Tensor dout) {
  std::vector<Tensor> fresh;
  for (const Tensor& x : in) fresh.push_back(x * scalar_like(x, 1.0));
  Tensor y = n.op->decompose(n, fresh);
  return gradients(y, fresh, dout);
}

// ---- samples ----

// scaled_dot_product_attention's samples whose q, k, v share their leading axes, with the
// operands the gradient ops add (lse kept near the scores' size so exp(s - lse) stays moderate).
std::vector<OpSample> training_samples(Form form) {
  struct Case {
    const char* label;
    std::vector<Shape> shapes;  // q, k, v[, mask]
    bool causal;
    double scale;
  };
  const std::vector<Case> cases{
      {"heads", {{2, 3, 4}, {2, 5, 4}, {2, 5, 4}}, false, 0.0},
      {"causal_square", {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 3}}, true, 0.0},
      {"causal_long_query", {{2, 5, 3}, {2, 3, 3}, {2, 3, 2}}, true, 0.0},
      {"causal_long_key", {{1, 3, 4}, {1, 5, 4}, {1, 5, 4}}, true, 0.75},
      {"mask_over_heads", {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, {2, 1, 3, 5}}, false, 0.0},
      {"gqa_mask_causal", {{1, 4, 3, 2}, {1, 2, 3, 2}, {1, 2, 3, 2}, {3, 3}}, true, 0.5},
      {"gqa_one_kv_head", {{2, 3, 2, 4}, {2, 1, 4, 4}, {2, 1, 4, 3}}, false, 0.0},
      {"single_head_2d", {{3, 4}, {5, 4}, {5, 2}}, false, 0.0},
  };
  std::vector<OpSample> out;
  for (const Case& c : cases) {
    const bool has_mask = c.shapes.size() == 4;
    const AttentionAttrs attrs{c.causal, c.scale, has_mask};
    OpSample o{.label = c.label, .attrs = attrs};
    auto add = [&o](Shape shape, double lo, double hi) {
      o.inputs.push_back({std::move(shape), DType::f32});
      o.ranges.push_back({lo, hi});
      o.no_grad.push_back(false);
    };
    std::vector<TensorType> qkv;
    for (const Shape& s : c.shapes) qkv.push_back({s, DType::f32});
    const AttentionGeometry g = attention_geometry(qkv, attrs, "sample");
    const Operands ops = operands_of(form);
    add(c.shapes[0], -1.0, 1.0);
    add(c.shapes[1], -1.0, 1.0);
    if (ops.v >= 0) add(c.shapes[2], -1.0, 1.0);
    if (ops.dout >= 0) add(g.out, -1.0, 1.0);
    if (ops.lse >= 0) add(g.rows(), 1.0, 2.0);
    if (ops.delta >= 0) add(g.rows(), -0.5, 0.5);
    if (has_mask) add(c.shapes[3], -1.0, 1.0);
    out.push_back(std::move(o));
  }
  return out;
}

OpDef grad_def(Form form) {
  return OpDef{
      .name = std::string(op_name(form)),
      .arity = -1,
      .archetype = Archetype::attention,
      .infer =
          [form](const Attrs& attrs, std::span<const TensorType> in) {
            const Operands o = operands_of(form);
            training_geometry(form, in, attrs.as<AttentionAttrs>());
            return form == Form::grad_q ? in[0] : form == Form::grad_k ? in[1] : v_type(in, o);
          },
      .eval = [form](const Node& n,
                     std::span<const Array* const> in) { return eval_grad(n, in, form); },
      .vjp = [](const Node& n, std::span<const Tensor> in, Tensor,
                Tensor g) { return vjp_by_decomposition(n, in, g); },
      .decompose = [form](const Node& n,
                          std::span<const Tensor> in) { return grad_decompose(n, in, form); },
      .samples = [form] { return training_samples(form); },
      .summary = "gradient of scaled_dot_product_attention's operand from dout, lse and "
                 "delta = rowsum(dout * out), without the probability matrix",
      .internal = true,
  };
}

}  // namespace

size_t attention_matrix_operands(std::string_view op) {
  if (op == "scaled_dot_product_attention") return 3;
  for (const Form f : {Form::lse, Form::grad_q, Form::grad_k, Form::grad_v}) {
    if (op != op_name(f)) continue;
    const Operands o = operands_of(f);
    return static_cast<size_t>(std::max({o.v, o.dout, 1}) + 1);
  }
  return 0;
}

bool attention_training_applies(const AttentionGeometry& g) {
  return leading(g.q) == g.batch && leading(g.k) == g.batch && leading(g.v) == g.batch;
}

std::vector<Tensor> attention_training_vjp(const AttentionAttrs& a, std::span<const Tensor> in,
                                           Tensor out, Tensor dout) {
  Graph& graph = out.graph();
  const Tensor q = in[0], k = in[1], v = in[2];
  const auto with_mask = [&](std::vector<Tensor> operands) {
    if (a.has_mask) operands.push_back(in[3]);
    return operands;
  };
  Tensor lse = graph.apply(op_name(Form::lse), a, with_mask({q, k}));
  // delta in f32 like lse (row_stat_dtype): a 16-bit delta would round dS's offset.
  const DType stat = row_stat_dtype(q.dtype());
  Tensor delta =
      stat == q.dtype() ? sum(dout * out, {-1}) : sum(cast(dout, stat) * cast(out, stat), {-1});
  std::vector<Tensor> grads(in.size());
  const std::vector<Tensor> qk_operands = with_mask({q, k, v, dout, lse, delta});
  grads[0] = graph.apply(op_name(Form::grad_q), a, qk_operands);
  grads[1] = graph.apply(op_name(Form::grad_k), a, qk_operands);
  grads[2] = graph.apply(op_name(Form::grad_v), a, with_mask({q, k, dout, lse}));
  if (a.has_mask) grads[3] = attention_mask_grad(a, in, out, dout);
  return grads;
}

}  // namespace ops

void register_attention_training_ops(OpRegistry& r) {
  using namespace ops;
  r.add(OpDef{
      .name = std::string(op_name(Form::lse)),
      .arity = -1,
      .archetype = Archetype::attention,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            const AttentionGeometry g =
                training_geometry(Form::lse, in, attrs.as<AttentionAttrs>());
            return TensorType{g.rows(), row_stat_dtype(in[0].dtype)};
          },
      .eval = eval_lse,
      .vjp = [](const Node& n, std::span<const Tensor> in, Tensor,
                Tensor g) { return vjp_by_decomposition(n, in, g); },
      .decompose = lse_decompose,
      .samples = [] { return training_samples(Form::lse); },
      .summary = "log-sum-exp of each query row's attention scores (saved for the backward pass)",
      .internal = true,
  });
  for (Form f : {Form::grad_q, Form::grad_k, Form::grad_v}) r.add(grad_def(f));
}

}  // namespace mn
