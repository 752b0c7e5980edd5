// The attention ops of language-model inference, whose positions are runtime values (an i32
// tensor) rather than attributes: rope_positions and cached_attention (attention over a KV cache
// up to each query's position).
#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "ir/op_def.h"
#include "ir/ops/attention.h"
#include "ir/ops/attention_internal.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"
#include "ir/ops/nn_util.h"

namespace mn {

namespace ops {

std::vector<double> rope_inv_freq(const RopePositionsAttrs& a, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0 / std::pow(a.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  if (!a.llama3) return f;
  // transformers' _compute_llama3_parameters, term by term.
  const auto old_context = static_cast<double>(a.original_max_position);
  const double low_freq_wavelen = old_context / a.low_freq_factor;
  const double high_freq_wavelen = old_context / a.high_freq_factor;
  for (double& inv : f) {
    const double wavelen = 2.0 * std::numbers::pi / inv;
    const double scaled = wavelen > low_freq_wavelen ? inv / a.factor : inv;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const double smooth =
          (old_context / wavelen - a.low_freq_factor) / (a.high_freq_factor - a.low_freq_factor);
      inv = (1.0 - smooth) * scaled / a.factor + smooth * scaled;
    } else {
      inv = scaled;
    }
  }
  return f;
}

namespace {

constexpr std::string_view kCached = "cached_attention";

// The shape positions broadcast against: x's without its last axis.
Shape rows_of(const Shape& x) { return Shape(x.begin(), x.end() - 1); }

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  try {
    return broadcast_shapes(from, to) == to;
  } catch (const ShapeError&) {
    return false;
  }
}

TensorType infer_rope_positions(std::string_view op, const Attrs& attrs,
                                std::span<const TensorType> in) {
  const auto& a = attrs.as<RopePositionsAttrs>();
  if (in.size() != 2) shape_fail(op, in, "operands x, positions");
  if (!is_float(in[0].dtype)) shape_fail(op, in, "a float x");
  if (in[0].rank() < 1 || in[0].shape.back() % 2 != 0) {
    shape_fail(op, in, "x of shape [..., D] with D even");
  }
  if (in[1].dtype != DType::i32) shape_fail(op, in, "i32 positions");
  if (!broadcasts_to(in[1].shape, rows_of(in[0].shape))) {
    shape_fail(
        op, in,
        "positions broadcastable to x's shape without D, " + shape_str(rows_of(in[0].shape)));
  }
  if (!(a.theta > 0.0) || !std::isfinite(a.theta)) {
    shape_fail(op, in, "theta > 0 (got " + std::to_string(a.theta) + ")");
  }
  if (a.llama3 && !(a.factor > 0.0 && a.low_freq_factor > 0.0 &&
                    a.high_freq_factor > a.low_freq_factor && a.original_max_position > 0)) {
    shape_fail(op, in,
               "llama3 scaling with factor > 0, 0 < low_freq_factor < high_freq_factor and "
               "original_max_position > 0");
  }
  return in[0];
}

// direction +1: rope_positions; -1: its transpose.
Array eval_rope_positions(const Node& n, const Array& x, const Array& positions, double direction) {
  const int64_t dim = x.shape.back(), half = dim / 2;
  const std::vector<double> inv_freq = rope_inv_freq(n.attrs.as<RopePositionsAttrs>(), dim);
  const Shape rows = rows_of(x.shape);
  Array out(n.type.shape, n.type.dtype);
  const std::array<std::vector<int64_t>, 1> strides{broadcast_strides(positions.shape, rows)};
  for_each_broadcast<1>(rows, strides, [&](int64_t row, const std::array<int64_t, 1>& off) {
    const double p = positions.data[static_cast<size_t>(off[0])];
    const double* px = x.data.data() + row * dim;
    double* py = out.data.data() + row * dim;
    for (int64_t i = 0; i < half; ++i) {
      const double c = std::cos(p * inv_freq[i]), s = direction * std::sin(p * inv_freq[i]);
      const double x1 = px[i], x2 = px[i + half];
      py[i] = x1 * c - x2 * s;
      py[i + half] = x2 * c + x1 * s;
    }
  });
  return out;
}

std::vector<OpSample> rope_positions_samples() {
  auto s = [](std::string label, Shape x, Shape positions, RopePositionsAttrs a, double high,
              DType dtype = DType::f32) {
    return OpSample{.label = std::move(label),
                    .inputs = {{std::move(x), dtype}, {std::move(positions), DType::i32}},
                    .attrs = a,
                    .ranges = {{-2.0, 2.0}, {0.0, high}},
                    .no_grad = {false, true}};
  };
  // original_max_position 64 puts the wavelengths of D = 16, theta = 1e4 (6 to 2e4) in all
  // three bands of the llama3 rescaling.
  const RopePositionsAttrs llama3{10000.0, true, 8.0, 1.0, 4.0, 64};
  return {s("per_row", {2, 2, 3, 6}, {2, 1, 3}, {100.0}, 50.0), s("shared", {3, 4}, {3}, {}, 20.0),
          s("decode_llama3", {2, 4, 1, 16}, {2, 1, 1}, llama3, 3000.0),
          s("prefill_llama3", {1, 2, 5, 16}, {5}, llama3, 200.0),
          s("f16", {2, 3, 8}, {2, 3}, {}, 500.0, DType::f16)};
}

// ---- cached_attention ----

// The caches (k and v, of one float dtype) may be narrower than the query: a 16-bit KV cache
// read beside an f32 query. The output is of the query's dtype.
TensorType infer_cached(const Attrs& attrs, std::span<const TensorType> in) {
  if (in.size() != 4) shape_fail(kCached, in, "operands q, k, v, positions");
  if (!is_float(in[0].dtype) || !is_float(in[1].dtype) || in[2].dtype != in[1].dtype) {
    shape_fail(kCached, in, "a float q, and k and v of one float dtype");
  }
  std::array<TensorType, 3> qkv{in[0], in[1], in[2]};
  qkv[1].dtype = qkv[2].dtype = in[0].dtype;
  const Shape out = attention_output_shape(kCached, qkv, attrs.as<CachedAttentionAttrs>().scale);
  if (in[3].dtype != DType::i32) shape_fail(kCached, in, "i32 positions");
  if (!broadcasts_to(in[3].shape, rows_of(out))) {
    shape_fail(kCached, in,
               "positions broadcastable to [..., Hq, Lq] = " + shape_str(rows_of(out)));
  }
  return {out, in[0].dtype};
}

// The additive mask of the positions: 0 where key j <= position, -inf elsewhere, shaped
// positions + [T] (broadcastable to the scores).
Array visibility_mask(const Array& positions, int64_t keys, DType dtype) {
  Shape shape = positions.shape;
  shape.push_back(keys);
  Array mask(shape, dtype);
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < positions.data.size(); ++r) {
    for (int64_t j = 0; j < keys; ++j) {
      mask.data[r * keys + j] = static_cast<double>(j) <= positions.data[r] ? 0.0 : -inf;
    }
  }
  return mask;
}

int64_t key_count(const TensorType& k) { return k.shape[k.shape.size() - 2]; }

// Attention with the positions' mask; a query whose position is negative sees no key, and its
// output is 0 as a sum over nothing (the masked softmax alone would give 0 / 0).
Array eval_cached(const Node& n, std::span<const Array* const> in) {
  const double scale = n.attrs.as<CachedAttentionAttrs>().scale;
  const Array mask = visibility_mask(*in[3], key_count(in[1]->type()), n.type.dtype);
  Node masked = n;
  masked.attrs = AttentionAttrs{false, scale, true};
  // Narrower caches widened to the query's dtype (exactly: their values are the same numbers),
  // copied only then.
  std::array<const Array*, 4> operands{in[0], in[1], in[2], &mask};
  Array k, v;
  if (in[1]->dtype != in[0]->dtype) {
    k = *in[1];
    v = *in[2];
    k.dtype = v.dtype = in[0]->dtype;
    operands[1] = &k;
    operands[2] = &v;
  }
  Array out = op_def("scaled_dot_product_attention").eval(masked, operands);
  const Shape rows = rows_of(out.shape);
  const int64_t dv = out.shape.back();
  const std::array<std::vector<int64_t>, 1> strides{broadcast_strides(in[3]->shape, rows)};
  for_each_broadcast<1>(rows, strides, [&](int64_t row, const std::array<int64_t, 1>& off) {
    if (in[3]->data[static_cast<size_t>(off[0])] < 0) {
      std::fill_n(out.data.begin() + row * dv, dv, 0.0);
    }
  });
  return out;
}

// Gradients as of attention with the positions' mask built in graph ops (key index <= position).
std::vector<Tensor> cached_vjp(const Node& n, std::span<const Tensor> in, Tensor out, Tensor dout) {
  Graph& g = out.graph();
  const int64_t keys = in[1].dim(-2);
  Array index({keys}, in[0].dtype());
  for (int64_t j = 0; j < keys; ++j) index.data[j] = static_cast<double>(j);
  Tensor position = unsqueeze(cast(in[3], in[0].dtype()), -1);
  Tensor visible = le(g.constant(std::move(index)), position);
  Tensor mask = where(visible, scalar_like(in[0], 0.0),
                      scalar_like(in[0], -std::numeric_limits<double>::infinity()));
  // Narrower caches take part widened, and get their gradients rounded back.
  const DType dtype = in[0].dtype();
  auto widened = [&](const Tensor& t) { return t.dtype() == dtype ? t : cast(t, dtype); };
  const std::vector<Tensor> operands{in[0], widened(in[1]), widened(in[2]), mask};
  std::vector<Tensor> grads =
      attention_vjp_masked(n.attrs.as<CachedAttentionAttrs>().scale, operands, out, dout);
  for (int i = 1; i < 3; ++i) {
    if (grads[i].valid() && grads[i].dtype() != in[i].dtype())
      grads[i] = cast(grads[i], in[i].dtype());
  }
  grads[3] = Tensor();  // positions: integers, no gradient
  return grads;
}

// An f32 query over bf16 caches (a 16-bit KV cache): the keys and values stay as stored. Their
// gradients, rounded to bf16, are not checked against finite differences (the query's is).
OpSample bf16_caches(OpSample o) {
  o.inputs[1].dtype = o.inputs[2].dtype = DType::bf16;
  o.no_grad[1] = o.no_grad[2] = true;
  return o;
}

std::vector<OpSample> cached_samples() {
  auto s = [](std::string label, std::vector<Shape> qkv, Shape positions, double high,
              double scale = 0.0, DType dtype = DType::f32) {
    OpSample o{.label = std::move(label), .attrs = CachedAttentionAttrs{scale}};
    for (auto& shape : qkv) {
      o.inputs.push_back({std::move(shape), dtype});
      o.ranges.push_back({-1.0, 1.0});
      o.no_grad.push_back(false);
    }
    o.inputs.push_back({std::move(positions), DType::i32});
    o.ranges.push_back({0.0, high});
    o.no_grad.push_back(true);
    return o;
  };
  return {
      s("prefill_gqa", {{2, 4, 3, 4}, {2, 2, 6, 4}, {2, 2, 6, 4}}, {2, 1, 3}, 6.0),
      s("decode_gqa", {{2, 4, 1, 8}, {2, 1, 40, 8}, {2, 1, 40, 8}}, {2, 1, 1}, 40.0),
      s("per_head", {{1, 2, 2, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}}, {1, 2, 2}, 5.0, 0.5),
      s("tiled_prefill", {{1, 1, 9, 4}, {1, 1, 12, 4}, {1, 1, 12, 4}}, {9}, 12.0),
      s("single_head_2d", {{2, 4}, {6, 4}, {6, 2}}, {2}, 6.0),
      s("f16_decode", {{1, 2, 1, 8}, {1, 1, 30, 8}, {1, 1, 30, 8}}, {1}, 30.0, 0.0, DType::f16),
      bf16_caches(
          s("bf16_caches_decode", {{1, 4, 1, 16}, {1, 2, 70, 16}, {1, 2, 70, 16}}, {1}, 70.0)),
      bf16_caches(s("bf16_caches_prefill", {{1, 2, 5, 8}, {1, 1, 9, 8}, {1, 1, 9, 8}}, {5}, 9.0)),
  };
}

}  // namespace
}  // namespace ops

void register_attention_position_ops(OpRegistry& r) {
  using namespace ops;
  auto rope_op = [](std::string name, double direction, std::string inverse, std::string summary,
                    bool internal) {
    return OpDef{
        .name = name,
        .arity = 2,
        .archetype = Archetype::pointwise,
        .infer = [name](
                     const Attrs& a,
                     std::span<const TensorType> in) { return infer_rope_positions(name, a, in); },
        .eval =
            [direction](const Node& n, std::span<const Array* const> in) {
              return eval_rope_positions(n, *in[0], *in[1], direction);
            },
        .vjp =
            [inverse](const Node& n, std::span<const Tensor> in, Tensor, Tensor g) {
              return std::vector<Tensor>{g.graph().apply(inverse, n.attrs, {g, in[1]}), Tensor()};
            },
        .samples = rope_positions_samples,
        .summary = std::move(summary),
        .internal = internal,
    };
  };
  r.add(rope_op("rope_positions", 1.0, "rope_positions_backward",
                "rotary embedding at runtime i32 positions, optional llama3 frequency scaling",
                false));
  r.add(rope_op("rope_positions_backward", -1.0, "rope_positions",
                "transpose of rope_positions: rotation by the negated angles", true));
  r.add(OpDef{
      .name = std::string(kCached),
      .arity = 4,
      .archetype = Archetype::attention,
      .infer = infer_cached,
      .eval = eval_cached,
      .vjp = cached_vjp,
      .samples = cached_samples,
      .summary = "attention over a KV cache: query i sees keys j <= positions[i] (i32), GQA",
  });
}

Tensor rope_positions(Tensor x, Tensor positions, double theta) {
  ops::require_tensor(x, "rope_positions", "x");
  ops::require_tensor(positions, "rope_positions", "positions");
  return x.graph().apply("rope_positions", RopePositionsAttrs{.theta = theta}, {x, positions});
}

Tensor rope_positions(Tensor x, Tensor positions, double theta, const Llama3RopeScaling& scaling) {
  ops::require_tensor(x, "rope_positions", "x");
  ops::require_tensor(positions, "rope_positions", "positions");
  return x.graph().apply(
      "rope_positions",
      RopePositionsAttrs{theta, true, scaling.factor, scaling.low_freq_factor,
                         scaling.high_freq_factor, scaling.original_max_position},
      {x, positions});
}

Tensor cached_attention(Tensor q, Tensor k, Tensor v, Tensor positions, double scale) {
  for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}, {positions, "positions"}}) {
    ops::require_tensor(t, ops::kCached, name);
  }
  if (scale <= 0.0) scale = 0.0;
  return q.graph().apply(ops::kCached, CachedAttentionAttrs{scale}, {q, k, v, positions});
}

}  // namespace mn
