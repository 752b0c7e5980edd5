// scaled_dot_product_attention and rotary embeddings (rope). The training forms of attention
// (log-sum-exp and gradient ops) are in attention_training.cpp.
//
// The graph-op forms (decomposition and vjp) view grouped-query heads as two axes: q becomes
// [..., Hkv, G, Lq, D] and k, v become [..., Hkv, 1, Lk, *], so one broadcasting matmul serves
// every group; the gradients of k and v sum over G inside their products where the group can
// join K (key_side_gradient), else by sum_to.
#include "ir/ops/attention.h"
#include "ir/ops/attention_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"
#include "ir/ops/nn_util.h"

namespace mn {

namespace ops {

constexpr std::string_view kSdpa = "scaled_dot_product_attention";

Shape attention_pad_to(const Shape& s, int rank) {
  Shape p(static_cast<size_t>(rank) - s.size(), 1);
  p.insert(p.end(), s.begin(), s.end());
  return p;
}
namespace {
Shape concat_shape(Shape a, std::initializer_list<int64_t> b) {
  a.insert(a.end(), b);
  return a;
}
Shape leading(const Shape& s, size_t drop) { return Shape(s.begin(), s.end() - drop); }
Shape pad_to(const Shape& s, int rank) { return attention_pad_to(s, rank); }
}  // namespace

// The default scale divides by sqrt(D) rather than multiplying by a rounded 1/sqrt(D): D is exact
// in every float dtype, so the graph forms evaluate exactly like the reference.
double attention_scaled(double s, double scale, int64_t d) {
  return scale > 0.0 ? s * scale : s / std::sqrt(static_cast<double>(d));
}
Tensor attention_scaled(Tensor s, double scale, int64_t d) {
  return scale > 0.0 ? s * scale : s / sqrt(scalar_like(s, static_cast<double>(d)));
}

AttentionGeometry attention_geometry(std::span<const TensorType> in, const AttentionAttrs& a,
                                     std::string_view op) {
  const size_t expected = a.has_mask ? 4 : 3;
  if (in.size() != expected) {
    shape_fail(op, in, a.has_mask ? "operands q, k, v, mask" : "operands q, k, v");
  }
  require_same_float(op, in);
  if (!std::isfinite(a.scale)) shape_fail(op, in, "a finite scale");
  int r = 0;
  for (int i = 0; i < 3; ++i) {
    if (in[i].rank() < 2) shape_fail(op, in, "q, k, v of shape [..., H, L, D] or [L, D]");
    r = std::max(r, in[i].rank());
  }
  AttentionGeometry g;
  g.heads = r >= 3;
  g.rank = std::max(r, 3);
  const int R = g.rank;
  g.q = pad_to(in[0].shape, R);
  g.k = pad_to(in[1].shape, R);
  g.v = pad_to(in[2].shape, R);
  g.hq = g.q[R - 3], g.lq = g.q[R - 2], g.d = g.q[R - 1];
  g.hkv = g.k[R - 3], g.lk = g.k[R - 2], g.dv = g.v[R - 1];
  if (g.k[R - 1] != g.d) shape_fail(op, in, "q and k with the same last dimension D");
  if (g.v[R - 3] != g.hkv || g.v[R - 2] != g.lk) {
    shape_fail(op, in, "k and v with the same heads and length ([..., Hkv, Lk, *])");
  }
  if (g.hq % g.hkv != 0) {
    shape_fail(op, in,
               "query heads (" + std::to_string(g.hq) + ") a multiple of key/value heads (" +
                   std::to_string(g.hkv) + ")");
  }
  try {
    g.batch = broadcast_shapes(leading(g.q, 3), leading(g.k, 3));
    g.batch = broadcast_shapes(g.batch, leading(g.v, 3));
  } catch (const ShapeError&) {
    shape_fail(op, in, "leading (batch) axes of q, k, v that broadcast");
  }
  g.out = g.heads ? concat_shape(g.batch, {g.hq, g.lq, g.dv}) : Shape{g.lq, g.dv};
  g.scores = concat_shape(g.batch, {g.hq, g.lq, g.lk});
  if (a.has_mask) {
    const Shape user_scores = g.heads ? g.scores : Shape{g.lq, g.lk};
    bool ok = in[3].rank() <= static_cast<int>(user_scores.size());
    if (ok) {
      try {
        ok = broadcast_shapes(in[3].shape, user_scores) == user_scores;
      } catch (const ShapeError&) {
        ok = false;
      }
    }
    if (!ok) shape_fail(op, in, "a mask broadcastable to the scores " + shape_str(user_scores));
    g.mask = pad_to(in[3].shape, R);
  }
  return g;
}

AttentionGrouped attention_grouped(const AttentionGeometry& g, std::span<const Tensor> in,
                                   bool has_mask) {
  const int64_t G = g.group();
  AttentionGrouped r;
  r.q = reshape(in[0], concat_shape(leading(g.q, 3), {g.hkv, G, g.lq, g.d}));
  r.k = reshape(in[1], concat_shape(leading(g.k, 3), {g.hkv, 1, g.lk, g.d}));
  r.v = reshape(in[2], concat_shape(leading(g.v, 3), {g.hkv, 1, g.lk, g.dv}));
  if (has_mask) {
    const int R = g.rank;
    const bool per_head = g.mask[R - 3] != 1;
    Shape s = leading(g.mask, 3);
    s.insert(s.end(), {per_head ? g.hkv : 1, per_head ? G : 1, g.mask[R - 2], g.mask[R - 1]});
    r.mask = reshape(in[3], s);
  }
  r.out = concat_shape(g.batch, {g.hkv, G, g.lq, g.dv});
  return r;
}

Tensor attention_scores(const AttentionGeometry& g, const AttentionGrouped& t,
                        const AttentionAttrs& a) {
  Tensor s = attention_scaled(matmul(t.q, t.k, false, true), a.scale, g.d);
  if (a.has_mask) s = s + t.mask;
  if (a.causal) {
    Array keep({g.lq, g.lk}, t.q.dtype());
    for (int64_t i = 0; i < g.lq; ++i) {
      for (int64_t j = 0; j <= std::min(i, g.lk - 1); ++j) keep.data[i * g.lk + j] = 1.0;
    }
    Graph& graph = t.q.graph();
    s = where(graph.constant(std::move(keep)), s,
              graph.scalar(-std::numeric_limits<double>::infinity(), s.dtype()));
  }
  return s;
}

namespace {

using Geometry = AttentionGeometry;
using Grouped = AttentionGrouped;
Geometry geometry(std::span<const TensorType> in, const AttentionAttrs& a,
                  std::string_view op = kSdpa) {
  return attention_geometry(in, a, op);
}
Grouped grouped(const Geometry& g, std::span<const Tensor> in, bool has_mask) {
  return attention_grouped(g, in, has_mask);
}
Tensor scores(const Geometry& g, const Grouped& t, const AttentionAttrs& a) {
  return attention_scores(g, t, a);
}
double scaled(double s, double scale, int64_t d) { return attention_scaled(s, scale, d); }
Tensor scaled(Tensor s, double scale, int64_t d) { return attention_scaled(s, scale, d); }

Geometry geometry_of(std::span<const Tensor> in, const AttentionAttrs& a) {
  std::vector<TensorType> types;
  for (const Tensor& t : in) types.push_back(t.type());
  return geometry(types, a);
}

// Strides of a padded operand over the batch axes only (0 where it broadcasts).
std::vector<int64_t> batch_strides(const Shape& padded, const Shape& full) {
  std::vector<int64_t> s = broadcast_strides(padded, full);
  s.resize(s.size() - 3);
  return s;
}

Array eval_sdpa(const Node& n, std::span<const Array* const> in) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  std::vector<TensorType> types;
  for (const Array* x : in) types.push_back(x->type());
  const Geometry g = geometry(types, a);
  const int R = g.rank;
  // An explicit scale as the dtype holds it, like the graph scalar of the decomposition and vjp.
  const double scale = a.scale > 0.0 ? round_to_dtype(a.scale, n.type.dtype) : 0.0;
  const int64_t group = g.group();
  const double* q = in[0]->data.data();
  const double* k = in[1]->data.data();
  const double* v = in[2]->data.data();
  const double* mask = a.has_mask ? in[3]->data.data() : nullptr;
  const std::vector<int64_t> ms = a.has_mask ? broadcast_strides(g.mask, g.scores)
                                             : std::vector<int64_t>(static_cast<size_t>(R), 0);
  const std::array<std::vector<int64_t>, 4> strides{
      batch_strides(g.q, concat_shape(g.batch, {g.hq, g.lq, g.d})),
      batch_strides(g.k, concat_shape(g.batch, {g.hkv, g.lk, g.d})),
      batch_strides(g.v, concat_shape(g.batch, {g.hkv, g.lk, g.dv})),
      std::vector<int64_t>(ms.begin(), ms.end() - 3)};

  Array out(n.type.shape, n.type.dtype);
  std::vector<double> p(static_cast<size_t>(g.lk));
  for_each_broadcast<4>(g.batch, strides, [&](int64_t b, const std::array<int64_t, 4>& off) {
    for (int64_t h = 0; h < g.hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < g.lq; ++i) {
        const double* qi = q + off[0] + (h * g.lq + i) * g.d;
        const int64_t visible = a.causal ? std::min(g.lk, i + 1) : g.lk;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const double* kj = k + off[1] + (hk * g.lk + j) * g.d;
          double s = 0.0;
          for (int64_t e = 0; e < g.d; ++e) s += qi[e] * kj[e];
          s = scaled(s, scale, g.d);
          if (mask) s += mask[off[3] + h * ms[R - 3] + i * ms[R - 2] + j * ms[R - 1]];
          p[j] = s;
          m = std::max(m, s);
        }
        double total = 0.0;
        for (int64_t j = 0; j < visible; ++j) total += (p[j] = std::exp(p[j] - m));
        double* oi = out.data.data() + ((b * g.hq + h) * g.lq + i) * g.dv;
        for (int64_t j = 0; j < visible; ++j) {
          const double w = p[j] / total;
          const double* vj = v + off[2] + (hk * g.lk + j) * g.dv;
          for (int64_t e = 0; e < g.dv; ++e) oi[e] += w * vj[e];
        }
      }
    }
  });
  return out;
}

Tensor sdpa_decompose(const Node& n, std::span<const Tensor> in) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const Geometry g = geometry_of(in, a);
  const Grouped t = grouped(g, in, a.has_mask);
  Tensor p = softmax_primitive(scores(g, t, a), -1);
  return reshape(matmul(p, t.v), g.out);
}

// Flash-attention's backward in graph ops: P is recomputed from q and k, and the softmax term
// rowsum(dP * P) equals rowsum(dO * O), which is cheaper (Lq x Dv instead of Lq x Lk).
// d(scores) in the grouped layout, with what the gradients of q, k, v take from it. The softmax
// term rowsum(dP * P) equals rowsum(dO * O), which is cheaper (Lq x Dv instead of Lq x Lk).
struct ScoreGrad {
  Geometry g;
  Grouped t;
  Tensor p, d_o, ds;
};
ScoreGrad score_grad(const AttentionAttrs& a, std::span<const Tensor> in, Tensor out, Tensor dout) {
  ScoreGrad r{geometry_of(in, a), {}, {}, {}, {}};
  r.t = grouped(r.g, in, a.has_mask);
  r.p = softmax(scores(r.g, r.t, a), -1);
  Tensor o = reshape(out, r.t.out);
  r.d_o = reshape(dout, r.t.out);
  Tensor dp = matmul(r.d_o, r.t.v, false, true);
  r.ds = r.p * (dp - sum(r.d_o * o, {-1}, true));  // masked positions have p = 0
  return r;
}

// A grouped-layout gradient summed over the group axis back to the operand's shape. Shapes are
// copied first: Tensor::shape() refers into the graph's node list, which the ops built in the
// same expression may reallocate.
Tensor ungrouped(Tensor grouped_grad, const Tensor& grouped_operand, const Tensor& operand) {
  const Shape grouped_shape = grouped_operand.shape(), shape = operand.shape();
  return reshape(sum_to(grouped_grad, grouped_shape), shape);
}

// The gradient of k or v, weightsᵀ · rows over every query row of the key/value head's group.
// Where only the group axis is summed (k and v take q's batch axes, G > 1) the group joins
// the product's K, [..., Hkv, G·Lq, Lk]ᵀ · [..., Hkv, G·Lq, *] (G and Lq are adjacent, so both
// reshapes are views): one product of G times the depth and no [..., Hkv, G, Lk, *] tensor
// summed afterwards; elsewhere the grouped product and its sum.
Tensor key_side_gradient(const Geometry& g, Tensor weights, Tensor rows, const Tensor& grouped,
                         const Tensor& operand) {
  const bool same_batch =
      leading(g.q, 3) == g.batch && leading(g.k, 3) == g.batch && leading(g.v, 3) == g.batch;
  if (g.group() == 1 || !same_batch || !g.heads) {
    return ungrouped(matmul(weights, rows, true, false), grouped, operand);
  }
  const Shape operand_shape = operand.shape();
  const int64_t width = rows.shape().back();
  const Tensor w = reshape(weights, concat_shape(g.batch, {g.hkv, g.group() * g.lq, g.lk}));
  const Tensor r = reshape(rows, concat_shape(g.batch, {g.hkv, g.group() * g.lq, width}));
  return reshape(matmul(w, r, true, false), operand_shape);
}

// Flash-attention's backward in graph ops: P is recomputed from q and k as an Lq x Lk tensor
// per head. The training ops (attention_training.cpp) compute the same without it.
std::vector<Tensor> sdpa_vjp_of(const AttentionAttrs& a, std::span<const Tensor> in, Tensor out,
                                Tensor dout) {
  const ScoreGrad sg = score_grad(a, in, out, dout);
  const Tensor dss = scaled(sg.ds, a.scale, sg.g.d);
  std::vector<Tensor> grads(in.size());
  grads[0] = ungrouped(matmul(dss, sg.t.k), sg.t.q, in[0]);
  grads[1] = key_side_gradient(sg.g, dss, sg.t.q, sg.t.k, in[1]);
  grads[2] = key_side_gradient(sg.g, sg.p, sg.d_o, sg.t.v, in[2]);
  if (a.has_mask) grads[3] = ungrouped(sg.ds, sg.t.mask, in[3]);
  return grads;
}

// Attention's backward pass in graph ops (the scores' and probabilities' Lq x Lk tensors per
// head, stored between forward and backward) or from the training ops (attention_lse,
// attention_grad_q/k/v: each probability recomputed where it is used, nothing of Lq x Lk in
// memory). MN_ATTENTION_BACKWARD=graph or =kernels forces one; unset (or `auto`), the training
// ops serve heads of at most 64 elements (which their register tiles take; wider heads spill
// there and ran 1.5-10x slower than the graph ops on an H200) once a layer's score tensor
// reaches kKernelBackwardScoreBytes: below, the graph ops' products are the faster (an H200 at
// batch 8, 9 heads, L = 512, D = 64: 0.90 ms against 1.20), above, memory decides and from
// L = 2048 on the kernels are the faster too (13.8 against 25.2 ms; docs/perf.md).
constexpr double kKernelBackwardScoreBytes = 32.0 * (1 << 20);

enum class BackwardForm { automatic, graph, kernels };

// Read at each vjp, so that one process can build both forms (the tests, bench_attention_train).
BackwardForm backward_form_chosen() {
  const char* v = std::getenv("MN_ATTENTION_BACKWARD");
  if (!v || !*v || std::string_view(v) == "auto") return BackwardForm::automatic;
  if (std::string_view(v) == "graph") return BackwardForm::graph;
  if (std::string_view(v) == "kernels") return BackwardForm::kernels;
  throw Error(std::string("MN_ATTENTION_BACKWARD must be 'auto', 'graph' or 'kernels', got '") +
              v + "'");
}

bool kernel_backward_for(const Geometry& g) {
  switch (backward_form_chosen()) {
    case BackwardForm::graph:
      return false;
    case BackwardForm::kernels:
      return true;
    case BackwardForm::automatic:
      break;
  }
  const double score_bytes = 4.0 * static_cast<double>(numel(g.scores));
  return g.d <= 64 && g.dv <= 64 && score_bytes >= kKernelBackwardScoreBytes;
}

// The training ops where chosen and they take the operands; the graph-op form otherwise (or
// when q, k or v broadcast over batch axes).
std::vector<Tensor> sdpa_vjp(const Node& n, std::span<const Tensor> in, Tensor out, Tensor dout) {
  const auto& a = n.attrs.as<AttentionAttrs>();
  const Geometry g = geometry_of(in, a);
  if (attention_training_applies(g) && kernel_backward_for(g)) {
    return attention_training_vjp(a, in, out, dout);
  }
  return sdpa_vjp_of(a, in, out, dout);
}

std::vector<OpSample> sdpa_samples() {
  auto s = [](std::string label, std::vector<Shape> shapes, bool causal, double scale) {
    OpSample o{.label = std::move(label),
               .attrs = AttentionAttrs{causal, scale, shapes.size() == 4}};
    for (auto& shape : shapes) {
      o.inputs.push_back({std::move(shape), DType::f32});
      o.ranges.push_back({-1.0, 1.0});
      o.no_grad.push_back(false);
    }
    return o;
  };
  return {
      s("heads", {{2, 3, 4}, {2, 5, 4}, {2, 5, 4}}, false, 0.0),
      s("causal_square", {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 3}}, true, 0.0),
      s("causal_long_query", {{2, 5, 3}, {2, 3, 3}, {2, 3, 2}}, true, 0.0),
      s("causal_long_key", {{1, 3, 4}, {1, 5, 4}, {1, 5, 4}}, true, 0.75),
      s("mask_over_heads", {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, {2, 1, 3, 5}}, false, 0.0),
      s("mask_per_head", {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, {2, 3, 5}}, false, 0.0),
      s("gqa_mask_causal", {{1, 4, 3, 2}, {1, 2, 3, 2}, {1, 2, 3, 2}, {3, 3}}, true, 0.5),
      s("gqa_one_kv_head", {{2, 3, 2, 4}, {2, 1, 4, 4}, {2, 1, 4, 3}}, false, 0.0),
      s("batch_broadcast", {{2, 1, 2, 3, 4}, {1, 3, 1, 4, 4}, {1, 3, 1, 4, 4}}, false, 0.0),
      s("single_head_2d", {{3, 4}, {5, 4}, {5, 2}}, false, 0.0),
  };
}

// ---- rope ----

TensorType infer_rope(std::string_view op, const Attrs& attrs, std::span<const TensorType> in) {
  const auto& a = attrs.as<RopeAttrs>();
  if (!is_float(in[0].dtype)) shape_fail(op, in, "a float operand");
  if (in[0].rank() < 2 || in[0].shape.back() % 2 != 0) {
    shape_fail(op, in, "x of shape [..., L, D] with D even");
  }
  if (!(a.theta > 0.0) || !std::isfinite(a.theta)) {
    shape_fail(op, in, "theta > 0 (got " + std::to_string(a.theta) + ")");
  }
  return in[0];
}

// cos and sin of the angle of (row l, pair i), [L, D/2].
struct RopeTable {
  int64_t length = 0, half = 0;
  std::vector<double> cos, sin;
};
RopeTable rope_table(const RopeAttrs& a, int64_t length, int64_t dim) {
  RopeTable t{length, dim / 2, {}, {}};
  std::vector<double> inv_freq(static_cast<size_t>(t.half));
  for (int64_t i = 0; i < t.half; ++i) {
    inv_freq[i] = 1.0 / std::pow(a.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  for (int64_t l = 0; l < length; ++l) {
    const double position = static_cast<double>(a.position_offset + l);
    for (int64_t i = 0; i < t.half; ++i) {
      t.cos.push_back(std::cos(position * inv_freq[i]));
      t.sin.push_back(std::sin(position * inv_freq[i]));
    }
  }
  return t;
}

// direction +1: rope; -1: its transpose (turn back by the same angle).
Array eval_rope(const Node& n, const Array& x, double direction) {
  const int64_t length = x.shape[x.shape.size() - 2], dim = x.shape.back();
  const RopeTable t = rope_table(n.attrs.as<RopeAttrs>(), length, dim);
  Array out(n.type.shape, n.type.dtype);
  for (int64_t row = 0; row * dim < x.numel(); ++row) {
    const int64_t l = row % length;
    const double* px = x.data.data() + row * dim;
    double* py = out.data.data() + row * dim;
    for (int64_t i = 0; i < t.half; ++i) {
      const double c = t.cos[l * t.half + i], s = direction * t.sin[l * t.half + i];
      const double x1 = px[i], x2 = px[i + t.half];
      py[i] = x1 * c - x2 * s;
      py[i + t.half] = x2 * c + x1 * s;
    }
  }
  return out;
}

// rotate_half form, x * [cos, cos] + concat(-x2, x1) * [sin, sin], with the angles computed in
// the graph from integer constants (positions, 2i, D) as exported models do: exact in every float
// dtype, unlike tables of rounded cos/sin values. (theta is a graph scalar, so it is exact for the
// integer bases models use.)
struct RopeTables {
  Tensor cos, sin;  // [L, D]: the half-angle tables side by side, concat({c, c}, -1)
};
RopeTables rope_tables(Tensor x, const RopeAttrs& a) {
  const int64_t length = x.dim(-2), dim = x.dim(-1), half = dim / 2;
  Array positions({length, 1}, x.dtype()), two_i({1, half}, x.dtype());
  for (int64_t l = 0; l < length; ++l)
    positions.data[l] = static_cast<double>(a.position_offset + l);
  for (int64_t i = 0; i < half; ++i) two_i.data[i] = static_cast<double>(2 * i);
  Graph& g = x.graph();
  Tensor exponent = g.constant(std::move(two_i)) / scalar_like(x, static_cast<double>(dim));
  Tensor inv_freq = 1.0 / pow(scalar_like(x, a.theta), exponent);
  Tensor angle = g.constant(std::move(positions)) * inv_freq;  // [L, D/2]
  Tensor c = cos(angle), s = sin(angle);
  return {concat({c, c}, -1), concat({s, s}, -1)};
}

Tensor rope_decompose(const Node& n, std::span<const Tensor> in) {
  Tensor x = in[0];
  const int64_t dim = x.dim(-1), half = dim / 2;
  const RopeTables t = rope_tables(x, n.attrs.as<RopeAttrs>());
  Tensor rotated = concat({-slice(x, -1, half, dim), slice(x, -1, 0, half)}, -1);
  return x * t.cos + rotated * t.sin;
}

// The gradient of rope's decomposition exactly as autodiff writes it, so that the e-graph
// recognizes the backward pass of a rotary embedding written out (the built-in transformer's):
// g * [cos, cos] plus rotate_half's transpose of g * [sin, sin], each half padded back into
// place, summed in autodiff's order.
Tensor rope_backward_decompose(const Node& n, std::span<const Tensor> in) {
  Tensor g = in[0];
  const int64_t dim = g.dim(-1), half = dim / 2;
  const RopeTables t = rope_tables(g, n.attrs.as<RopeAttrs>());
  auto last_axis = [&](int64_t before, int64_t after) {
    std::vector<std::pair<int64_t, int64_t>> p(static_cast<size_t>(g.rank()), {0, 0});
    p.back() = {before, after};
    return p;
  };
  Tensor gs = g * t.sin;
  return g * t.cos + pad(slice(gs, -1, half, dim), last_axis(0, half)) +
         pad(-slice(gs, -1, 0, half), last_axis(half, 0));
}

std::vector<OpSample> rope_samples() {
  auto s = [](std::string label, Shape shape, double theta, int64_t offset) {
    return OpSample{.label = std::move(label),
                    .inputs = {{std::move(shape), DType::f32}},
                    .attrs = RopeAttrs{theta, offset},
                    .ranges = {{-2.0, 2.0}},
                    .no_grad = {false}};
  };
  return {s("plain", {3, 4}, 10000.0, 0), s("heads_offset", {2, 2, 3, 6}, 100.0, 5),
          s("pair", {1, 5, 2}, 10000.0, 3), s("single_row", {2, 1, 8}, 500000.0, 17)};
}

}  // namespace
}  // namespace ops

namespace ops {
Shape attention_output_shape(std::string_view op, std::span<const TensorType> qkv, double scale) {
  return attention_geometry(qkv, AttentionAttrs{false, scale, false}, op).out;
}
std::vector<Tensor> attention_vjp_masked(double scale, std::span<const Tensor> qkv_mask, Tensor out,
                                         Tensor dout) {
  return sdpa_vjp_of(AttentionAttrs{false, scale, true}, qkv_mask, out, dout);
}
Tensor attention_mask_grad(const AttentionAttrs& a, std::span<const Tensor> in, Tensor out,
                           Tensor dout) {
  const ScoreGrad sg = score_grad(a, in, out, dout);
  return ungrouped(sg.ds, sg.t.mask, in[3]);
}
}  // namespace ops

void register_attention_ops(OpRegistry& r) {
  using namespace ops;
  r.add(OpDef{
      .name = std::string(kSdpa),
      .arity = -1,
      .archetype = Archetype::attention,
      .infer =
          [](const Attrs& attrs, std::span<const TensorType> in) {
            return TensorType{geometry(in, attrs.as<AttentionAttrs>()).out, in[0].dtype};
          },
      .eval = eval_sdpa,
      .vjp = sdpa_vjp,
      .decompose = sdpa_decompose,
      .samples = sdpa_samples,
      .summary = "softmax(q k^T * scale + mask, causal) v with grouped-query heads",
  });
  r.add(OpDef{
      .name = "rope",
      .arity = 1,
      .archetype = Archetype::pointwise,
      .infer = [](const Attrs& a,
                  std::span<const TensorType> in) { return infer_rope("rope", a, in); },
      .eval = [](const Node& n,
                 std::span<const Array* const> in) { return eval_rope(n, *in[0], 1.0); },
      .vjp =
          [](const Node& n, std::span<const Tensor>, Tensor, Tensor g) {
            return std::vector<Tensor>{g.graph().apply("rope_backward", n.attrs, {g})};
          },
      .decompose = rope_decompose,
      .samples = rope_samples,
      .summary = "rotary position embedding, half-split pairs (i, i + D/2)",
  });
  r.add(OpDef{
      .name = "rope_backward",
      .arity = 1,
      .archetype = Archetype::pointwise,
      .infer = [](const Attrs& a,
                  std::span<const TensorType> in) { return infer_rope("rope_backward", a, in); },
      .eval = [](const Node& n,
                 std::span<const Array* const> in) { return eval_rope(n, *in[0], -1.0); },
      .vjp = [](const Node& n, std::span<const Tensor>, Tensor,
                Tensor g) { return std::vector<Tensor>{g.graph().apply("rope", n.attrs, {g})}; },
      .decompose = rope_backward_decompose,
      .samples = rope_samples,
      .summary = "transpose of rope: rotation by the negated angles",
      .internal = true,
  });
}

Tensor scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, Tensor mask, bool causal,
                                    double scale) {
  ops::require_tensor(q, ops::kSdpa, "q");
  ops::require_tensor(k, ops::kSdpa, "k");
  ops::require_tensor(v, ops::kSdpa, "v");
  std::vector<Tensor> operands{q, k, v};
  if (mask.valid()) operands.push_back(mask);
  if (scale <= 0.0) scale = 0.0;  // one spelling of the default keeps equal graphs equal
  return q.graph().apply(ops::kSdpa, AttentionAttrs{causal, scale, mask.valid()}, operands);
}

Tensor rope(Tensor x, double theta, int64_t position_offset) {
  ops::require_tensor(x, "rope", "x");
  return x.graph().apply("rope", RopeAttrs{theta, position_offset}, {x});
}

}  // namespace mn
