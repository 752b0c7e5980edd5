// The training forms of scaled_dot_product_attention: the log-sum-exp of each query row's
// scores (attention_lse) and the gradients of q, k and v computed from it (attention_grad_q,
// attention_grad_k, attention_grad_v), as flash attention's backward pass does. Each
// probability is recomputed where it is used, P_ij = exp(S_ij - lse_i), so no Lq x Lk tensor
// exists; D_i = rowsum(dO_i * O_i) is computed first by a graph reduction and passed in.
//
//   dV_j = sum_i P_ij dO_i                      dS_ij = P_ij (dO_i . v_j - D_i)
//   dQ_i = scale sum_j dS_ij k_j                dK_j  = scale sum_i dS_ij q_i
//
// with the sums over i running over every query head of k and v's group. Operands:
// attention_lse(q, k, v[, mask]); attention_grad_*(q, k, v, dout, lse, delta[, mask]), all with
// scaled_dot_product_attention's attributes. q, k, v must share their leading axes (a
// broadcast operand's gradient sums over its copies; the graph-op form handles that case).
//
// Their decompositions are the same formulas in graph ops (the e-graph holds both forms and the
// cost model chooses), and their backward passes differentiate those decompositions.
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

constexpr std::string_view kLse = "attention_lse";
enum class Wrt { q, k, v };
constexpr std::string_view grad_op_name(Wrt w) {
  return w == Wrt::q ? "attention_grad_q" : w == Wrt::k ? "attention_grad_k" : "attention_grad_v";
}

// Operands after q, k, v and before the mask.
constexpr size_t kLseExtra = 0, kGradExtra = 3;  // dout, lse, delta

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 3); }

AttentionGeometry training_geometry(std::string_view op, std::span<const TensorType> in,
                                    const AttentionAttrs& a, size_t extra) {
  const size_t expected = 3 + extra + (a.has_mask ? 1 : 0);
  if (in.size() != expected) {
    std::string names = extra ? "q, k, v, dout, lse, delta" : "q, k, v";
    shape_fail(op, in, "operands " + names + (a.has_mask ? ", mask" : ""));
  }
  require_same_float(op, in);
  std::vector<TensorType> qkv(in.begin(), in.begin() + 3);
  if (a.has_mask) qkv.push_back(in.back());
  const AttentionGeometry g = attention_geometry(qkv, a, op);
  if (!attention_training_applies(g)) {
    shape_fail(op, in, "q, k, v with the same leading (batch) axes");
  }
  if (extra) {
    if (in[3].shape != g.out) shape_fail(op, in, "dout of the output's shape " + shape_str(g.out));
    const Shape rows = g.rows();
    if (in[4].shape != rows || in[5].shape != rows) {
      shape_fail(op, in, "lse and delta of shape " + shape_str(rows) + " (one per query row)");
    }
  }
  return g;
}

AttentionGeometry geometry_of_node(const Node& n, std::span<const Array* const> in, size_t extra) {
  std::vector<TensorType> types;
  for (const Array* x : in) types.push_back(x->type());
  return training_geometry(n.op_name(), types, n.attrs.as<AttentionAttrs>(), extra);
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
  const AttentionGeometry g = geometry_of_node(n, in, kLseExtra);
  const double* mask = a.has_mask ? in[3]->data.data() : nullptr;
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

Array eval_grad(const Node& n, std::span<const Array* const> in, Wrt wrt) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_node(n, in, kGradExtra);
  const double* q = in[0]->data.data();
  const double* k = in[1]->data.data();
  const double* v = in[2]->data.data();
  const double* dout = in[3]->data.data();
  const double* lse = in[4]->data.data();
  const double* delta = in[5]->data.data();
  const double* mask = a.has_mask ? in[6]->data.data() : nullptr;
  Array out(n.type.shape, n.type.dtype);
  double* grad = out.data.data();
  const double inf = std::numeric_limits<double>::infinity();
  for_each_score(g, a, node_scale(n), q, k, mask,
                 [&](int64_t bh, int64_t hk, int64_t i, int64_t j, double s) {
                   if (s == -inf) return;  // a masked key weighs nothing
                   const int64_t row = bh * g.lq + i, key = hk * g.lk + j;
                   const double p = std::exp(s - lse[row]);
                   const double* doi = dout + row * g.dv;
                   if (wrt == Wrt::v) {
                     for (int64_t e = 0; e < g.dv; ++e) grad[key * g.dv + e] += p * doi[e];
                     return;
                   }
                   double dp = 0.0;
                   for (int64_t e = 0; e < g.dv; ++e) dp += doi[e] * v[key * g.dv + e];
                   const double ds = p * (dp - delta[row]);
                   if (wrt == Wrt::q) {
                     for (int64_t e = 0; e < g.d; ++e) grad[row * g.d + e] += ds * k[key * g.d + e];
                   } else {
                     for (int64_t e = 0; e < g.d; ++e) grad[key * g.d + e] += ds * q[row * g.d + e];
                   }
                 });
  if (wrt != Wrt::v) {
    const double scale = node_scale(n);
    for (double& x : out.data) x = attention_scaled(x, scale, g.d);
  }
  return out;
}

// ---- graph-op forms ----

std::vector<Tensor> qkv_mask_of(std::span<const Tensor> in, const AttentionAttrs& a) {
  std::vector<Tensor> r(in.begin(), in.begin() + 3);
  if (a.has_mask) r.push_back(in.back());
  return r;
}
AttentionGeometry geometry_of_tensors(std::string_view op, std::span<const Tensor> in,
                                      const AttentionAttrs& a, size_t extra) {
  std::vector<TensorType> types;
  for (const Tensor& t : in) types.push_back(t.type());
  return training_geometry(op, types, a, extra);
}
// A per-row tensor [..rows] in the grouped layout, [..., Hkv, G, Lq, 1].
Tensor grouped_rows(const AttentionGeometry& g, Tensor x) {
  Shape s = g.batch;
  s.insert(s.end(), {g.hkv, g.group(), g.lq, 1});
  return reshape(x, s);
}

Tensor lse_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_tensors(kLse, in, a, kLseExtra);
  const std::vector<Tensor> qkv = qkv_mask_of(in, a);
  Tensor s = attention_scores(g, attention_grouped(g, qkv, a.has_mask), a);
  Tensor m = max(s, {-1}, true);
  return reshape(log(sum(exp(s - m), {-1}, true)) + m, g.rows());
}

Tensor grad_decompose(const Node& n, std::span<const Tensor> in, Wrt wrt) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const AttentionGeometry g = geometry_of_tensors(grad_op_name(wrt), in, a, kGradExtra);
  const std::vector<Tensor> qkv = qkv_mask_of(in, a);
  const AttentionGrouped t = attention_grouped(g, qkv, a.has_mask);
  // Masked scores are -inf and so is their exp(s - lse): p = 0 there.
  Tensor p = exp(attention_scores(g, t, a) - grouped_rows(g, in[4]));
  Tensor d_o = reshape(in[3], t.out);
  Tensor grouped_grad, grouped_operand;
  if (wrt == Wrt::v) {
    grouped_grad = matmul(p, d_o, true, false);
    grouped_operand = t.v;
  } else {
    Tensor ds = p * (matmul(d_o, t.v, false, true) - grouped_rows(g, in[5]));
    Tensor dss = attention_scaled(ds, a.scale, g.d);
    grouped_grad = wrt == Wrt::q ? matmul(dss, t.k) : matmul(dss, t.q, true, false);
    grouped_operand = wrt == Wrt::q ? t.q : t.k;
  }
  const Shape grouped_shape = grouped_operand.shape();
  const Shape shape = in[static_cast<size_t>(wrt)].shape();
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
std::vector<OpSample> training_samples(bool grad) {
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
    for (int i = 0; i < 3; ++i) add(c.shapes[static_cast<size_t>(i)], -1.0, 1.0);
    if (grad) {
      std::vector<TensorType> qkv;
      for (const Shape& s : c.shapes) qkv.push_back({s, DType::f32});
      const AttentionGeometry g = attention_geometry(qkv, attrs, "sample");
      add(g.out, -1.0, 1.0);
      add(g.rows(), 1.0, 2.0);
      add(g.rows(), -0.5, 0.5);
    }
    if (has_mask) add(c.shapes[3], -1.0, 1.0);
    out.push_back(std::move(o));
  }
  return out;
}

OpDef grad_def(Wrt wrt) {
  return OpDef{
      .name = std::string(grad_op_name(wrt)),
      .arity = -1,
      .archetype = Archetype::attention,
      .infer =
          [wrt](const Attrs& attrs, std::span<const TensorType> in) {
            training_geometry(grad_op_name(wrt), in, attrs.as<AttentionAttrs>(), kGradExtra);
            return in[static_cast<size_t>(wrt)];
          },
      .eval = [wrt](const Node& n,
                    std::span<const Array* const> in) { return eval_grad(n, in, wrt); },
      .vjp = [](const Node& n, std::span<const Tensor> in, Tensor,
                Tensor g) { return vjp_by_decomposition(n, in, g); },
      .decompose = [wrt](const Node& n,
                         std::span<const Tensor> in) { return grad_decompose(n, in, wrt); },
      .samples = [] { return training_samples(true); },
      .summary = "gradient of scaled_dot_product_attention's operand from dout, lse and "
                 "delta = rowsum(dout * out), without the probability matrix",
      .internal = true,
  };
}

}  // namespace

bool attention_training_applies(const AttentionGeometry& g) {
  return leading(g.q) == g.batch && leading(g.k) == g.batch && leading(g.v) == g.batch;
}

std::vector<Tensor> attention_training_vjp(const AttentionAttrs& a, std::span<const Tensor> in,
                                           Tensor out, Tensor dout) {
  Graph& graph = out.graph();
  const std::vector<Tensor> qkv(in.begin(), in.begin() + 3);
  std::vector<Tensor> lse_operands = qkv;
  if (a.has_mask) lse_operands.push_back(in[3]);
  Tensor lse = graph.apply(kLse, a, lse_operands);
  Tensor delta = sum(dout * out, {-1});
  std::vector<Tensor> operands = qkv;
  operands.insert(operands.end(), {dout, lse, delta});
  if (a.has_mask) operands.push_back(in[3]);
  std::vector<Tensor> grads(in.size());
  for (Wrt w : {Wrt::q, Wrt::k, Wrt::v}) {
    grads[static_cast<size_t>(w)] = graph.apply(grad_op_name(w), a, operands);
  }
  if (a.has_mask) grads[3] = attention_mask_grad(a, in, out, dout);
  return grads;
}

}  // namespace ops

void register_attention_training_ops(OpRegistry& r) {
  using namespace ops;
  r.add(OpDef{
      .name = std::string(kLse),
      .arity = -1,
      .archetype = Archetype::attention,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            const AttentionGeometry g =
                training_geometry(kLse, in, attrs.as<AttentionAttrs>(), kLseExtra);
            return TensorType{g.rows(), in[0].dtype};
          },
      .eval = eval_lse,
      .vjp = [](const Node& n, std::span<const Tensor> in, Tensor,
                Tensor g) { return vjp_by_decomposition(n, in, g); },
      .decompose = lse_decompose,
      .samples = [] { return training_samples(false); },
      .summary = "log-sum-exp of each query row's attention scores (saved for the backward pass)",
      .internal = true,
  });
  for (Wrt w : {Wrt::q, Wrt::k, Wrt::v}) r.add(grad_def(w));
}

}  // namespace mn
