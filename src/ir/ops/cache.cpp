// cache_write: the KV-cache update of generation. cache [..., T, D], update [..., L, D] (the
// same leading axes), positions i32 [lead[:k]..., L] for any k (a prefix of the leading axes:
// [L] writes the same rows in every batch and head, [B, L] per batch, [B, H, L] per head):
//   out = cache; out[p, positions[p[:k], i], :] = update[p, i, :] for every leading index p
//   and every i in increasing order (a repeated position keeps the last update).
// The update may be wider than the cache (f32 keys into a bf16 cache): it is rounded to the
// cache's dtype as it is stored. The reference rejects a position outside [0, T) naming the op; on
// the GPU such rows are skipped (a kernel cannot report errors), leaving the cache row unchanged.
//
// The op may update input 0 in place (OpDef::updates_input0_in_place): assigned back to the
// state it reads, the planner lets the kernel write the state's own buffer (plan/in_place.h).
// Not differentiable: generation only reads the cache.
#include <string>

#include "ir/op_def.h"
#include "ir/ops/cache.h"

namespace mn {

namespace ops::cache_detail {

CacheWriteView cache_write_view(std::span<const TensorType> in) {
  const TensorType& c = in[0];
  const TensorType& u = in[1];
  const TensorType& p = in[2];
  if (c.rank() < 2) shape_fail("cache_write", in, "a cache of rank at least 2 ([..., T, D])");
  if (!is_float(c.dtype) || !is_float(u.dtype)) {
    shape_fail("cache_write", in, "a float cache and update (the update rounded to the cache's)");
  }
  if (p.dtype != DType::i32) shape_fail("cache_write", in, "i32 positions as operand 2");
  const size_t lead = static_cast<size_t>(c.rank() - 2);
  if (u.rank() != c.rank() || !std::equal(c.shape.begin(), c.shape.begin() + lead,
                                          u.shape.begin()) ||
      u.shape.back() != c.shape.back()) {
    shape_fail("cache_write", in, "an update [..., L, D] with the cache's leading axes and D");
  }
  const int64_t l = u.shape[lead];
  const size_t k = p.rank() == 0 ? 0 : static_cast<size_t>(p.rank() - 1);
  if (p.rank() == 0 || k > lead || p.shape.back() != l ||
      !std::equal(p.shape.begin(), p.shape.end() - 1, c.shape.begin())) {
    shape_fail("cache_write", in,
               "positions [lead[:k]..., L]: a prefix of the cache's leading axes, then L = " +
                   std::to_string(l));
  }
  CacheWriteView v;
  v.t = c.shape[lead];
  v.d = c.shape.back();
  v.l = l;
  v.rows = 1;
  for (size_t a = 0; a < lead; ++a) v.rows *= c.shape[a];
  int64_t per_position_row = 1;  // leading indices sharing one row of positions
  for (size_t a = k; a < lead; ++a) per_position_row *= c.shape[a];
  v.rows_per_position_row = per_position_row;
  return v;
}

}  // namespace ops::cache_detail

namespace {

using ops::cache_detail::cache_write_view;

Array eval_cache_write(const Node& n, std::span<const Array* const> in) {
  std::vector<TensorType> types{{in[0]->shape, in[0]->dtype},
                                {in[1]->shape, in[1]->dtype},
                                {in[2]->shape, in[2]->dtype}};
  const auto v = cache_write_view(types);
  const Array& pos = *in[2];
  for (size_t k = 0; k < pos.data.size(); ++k) {
    const double p = pos.data[k];
    if (p < 0 || p >= static_cast<double>(v.t)) {
      throw IndexError("cache_write: position " + std::to_string(static_cast<int64_t>(p)) +
                       " (element " + std::to_string(k) +
                       " of the positions) is out of range [0, " + std::to_string(v.t) +
                       ") for a cache of shape " + shape_str(in[0]->shape));
    }
  }
  Array out = *in[0];
  out.dtype = n.type.dtype;
  for (int64_t r = 0; r < v.rows; ++r) {
    const int64_t prow = r / v.rows_per_position_row;
    for (int64_t i = 0; i < v.l; ++i) {
      const auto t = static_cast<int64_t>(pos.data[static_cast<size_t>(prow * v.l + i)]);
      const double* src = in[1]->data.data() + (r * v.l + i) * v.d;
      double* dst = out.data.data() + (r * v.t + t) * v.d;
      for (int64_t e = 0; e < v.d; ++e) dst[e] = round_to_dtype(src[e], out.dtype);
    }
  }
  return out;
}

OpSample cache_sample(std::string label, Shape cache, Shape update, Shape positions) {
  OpSample s;
  s.label = std::move(label);
  const double t = static_cast<double>(cache[cache.size() - 2]);
  s.inputs = {{std::move(cache), DType::f32},
              {std::move(update), DType::f32},
              {std::move(positions), DType::i32}};
  s.ranges = {{-1.0, 1.0}, {-1.0, 1.0}, {0.0, t}};
  s.no_grad = {true, true, true};
  return s;
}

std::vector<OpSample> cache_write_samples() {
  auto half = cache_sample("f16_decode", {1, 2, 6, 4}, {1, 2, 1, 4}, {1, 1});
  half.inputs[0].dtype = half.inputs[1].dtype = DType::f16;
  // A 16-bit cache written from f32 keys: rounded as they are stored.
  auto rounded = cache_sample("bf16_cache_f32_update", {1, 2, 6, 8}, {1, 2, 2, 8}, {2});
  rounded.inputs[0].dtype = DType::bf16;
  // Random positions repeat, so "the last update wins" is exercised too; eight positions in six
  // slots surely do, with rows of 64 that whole subgroups share (the kernel's split scan).
  return {cache_sample("shared_positions", {2, 3, 8, 4}, {2, 3, 3, 4}, {3}),
          cache_sample("repeats_in_head_rows", {1, 2, 6, 64}, {1, 2, 8, 64}, {8}),
          cache_sample("per_batch", {2, 2, 5, 3}, {2, 2, 2, 3}, {2, 2}),
          cache_sample("per_head_decode", {2, 2, 7, 4}, {2, 2, 1, 4}, {2, 2, 1}),
          cache_sample("matrix", {6, 5}, {4, 5}, {4}),
          std::move(half),
          std::move(rounded)};
}

}  // namespace

void register_cache_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = "cache_write",
      .arity = 3,
      .archetype = Archetype::gather_scatter,
      .differentiable = false,
      .infer = [](const Attrs&, std::span<const TensorType> in) -> TensorType {
        cache_write_view(in);
        return in[0];
      },
      .eval = eval_cache_write,
      .samples = cache_write_samples,
      .summary = "cache with rows positions[..., i] replaced by update[..., i, :] (KV cache)",
      .updates_input0_in_place = true,
  });
}

Tensor cache_write(Tensor cache, Tensor update, Tensor positions) {
  if (!update.valid() || !positions.valid()) {
    throw Error("cache_write: update or positions is an empty Tensor");
  }
  return cache.graph().apply("cache_write", NoAttrs{}, {cache, update, positions});
}

}  // namespace mn
