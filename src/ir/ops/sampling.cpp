// sample_tokens: the next token of each row of logits, as Hugging Face's sampling with the
// temperature, top-k and top-p warpers in that order, from counter-based random numbers.
//
// The draw is the Gumbel-max form of sampling from the filtered softmax: the kept token with the
// largest v_t - log(E_t), E_t = -log(u_t) exponential, wins with probability softmax(v)_t. It
// needs one random number per token but no prefix sum, so a GPU row reduces it like an argmax.
#include "ir/ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ir/op_def.h"
#include "ir/ops/common.h"
#include "ir/ops/families.h"
#include "ir/ops/nn_util.h"

namespace mn {

namespace ops {
namespace {

constexpr std::string_view kSample = "sample_tokens";

bool is_scalar_or_rows(const TensorType& t, int64_t rows) {
  return t.rank() == 0 || (t.rank() == 1 && (t.shape[0] == 1 || t.shape[0] == rows));
}
bool is_scalar(const TensorType& t) { return t.rank() == 0 || (t.rank() == 1 && t.shape[0] == 1); }
bool is_int(DType d) { return d == DType::i32 || d == DType::u32; }

TensorType infer_sample(const Attrs&, std::span<const TensorType> in) {
  if (in.size() != 6)
    shape_fail(kSample, in, "operands logits, temperature, top_k, top_p, seed, step");
  const TensorType& logits = in[0];
  if (!is_float(logits.dtype) || logits.rank() != 2 || logits.shape[1] < 1) {
    shape_fail(kSample, in, "float logits of shape [B, V] with V >= 1");
  }
  const int64_t rows = logits.shape[0];
  const std::string per_row = " of shape [], [1] or [B] = [" + std::to_string(rows) + "]";
  if (!is_float(in[1].dtype) || !is_scalar_or_rows(in[1], rows)) {
    shape_fail(kSample, in, "a float temperature" + per_row);
  }
  if (in[2].dtype != DType::i32 || !is_scalar_or_rows(in[2], rows)) {
    shape_fail(kSample, in, "an i32 top_k" + per_row);
  }
  if (!is_float(in[3].dtype) || !is_scalar_or_rows(in[3], rows)) {
    shape_fail(kSample, in, "a float top_p" + per_row);
  }
  if (!is_int(in[4].dtype) || !is_scalar(in[4]))
    shape_fail(kSample, in, "a u32 or i32 scalar seed");
  if (!is_int(in[5].dtype) || !is_scalar(in[5]))
    shape_fail(kSample, in, "a u32 or i32 scalar step");
  return {{rows}, DType::i32};
}

// The lowest index of the largest value (NaN never wins).
int64_t first_argmax(const std::vector<double>& v, const std::vector<bool>& kept) {
  int64_t best = -1;
  for (size_t t = 0; t < v.size(); ++t) {
    if (kept[t] && !std::isnan(v[t]) && (best < 0 || v[t] > v[static_cast<size_t>(best)])) {
      best = static_cast<int64_t>(t);
    }
  }
  return std::max<int64_t>(best, 0);
}

// top-k: values below the k-th largest leave (ties with it stay, as HF's `scores < kth`).
void keep_top_k(const std::vector<double>& v, int64_t k, std::vector<bool>& kept) {
  if (k <= 0 || k >= static_cast<int64_t>(v.size())) return;
  std::vector<double> sorted = v;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const double kth = sorted[static_cast<size_t>(k - 1)];
  for (size_t t = 0; t < v.size(); ++t) kept[t] = kept[t] && v[t] >= kth;
}

// top-p: a token stays when the probability of the kept tokens above it is below top_p, which
// keeps the smallest set of most probable tokens reaching top_p (HF removes the tokens whose
// ascending cumulative probability is <= 1 - top_p); tokens tied with the last kept one stay.
void keep_top_p(const std::vector<double>& v, double top_p, std::vector<bool>& kept) {
  if (!(top_p < 1.0)) return;
  std::vector<size_t> order;
  for (size_t t = 0; t < v.size(); ++t) {
    if (kept[t]) order.push_back(t);
  }
  if (order.empty()) return;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  const double m = v[order.front()];
  double total = 0.0;
  for (size_t t : order) total += std::exp(v[t] - m);
  double above = 0.0;  // the mass of values strictly above the current one
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    double tied = 0.0;
    for (; j < order.size() && v[order[j]] == v[order[i]]; ++j) tied += std::exp(v[order[j]] - m);
    const bool stay = i == 0 || above < top_p * total;
    for (size_t x = i; x < j; ++x) kept[order[x]] = stay;
    above += tied;
    i = j;
  }
}

double at_row(const Array& a, int64_t row) {
  return a.data[a.data.size() == 1 ? 0 : static_cast<size_t>(row)];
}
uint32_t as_u32(double v) { return static_cast<uint32_t>(static_cast<int64_t>(v)); }

Array eval_sample(const Node& n, std::span<const Array* const> in) {
  const Array& logits = *in[0];
  const int64_t rows = logits.shape[0], vocab = logits.shape[1];
  const uint32_t seed = as_u32(in[4]->data[0]), step = as_u32(in[5]->data[0]);
  Array out(n.type.shape, DType::i32);
  std::vector<double> v(static_cast<size_t>(vocab));
  for (int64_t b = 0; b < rows; ++b) {
    // As the GPU holds them: f32 quotients of the stored values, NaN as -inf.
    const double temperature = round_to_dtype(at_row(*in[1], b), DType::f32);
    for (int64_t t = 0; t < vocab; ++t) {
      const double x = logits.data[static_cast<size_t>(b * vocab + t)];
      v[t] = std::isnan(x) ? -std::numeric_limits<double>::infinity() : x;
      if (temperature > 0.0) v[t] = round_to_dtype(v[t] / temperature, DType::f32);
    }
    std::vector<bool> kept(static_cast<size_t>(vocab), true);
    if (!(temperature > 0.0)) {
      out.data[b] = static_cast<double>(first_argmax(v, kept));
      continue;
    }
    keep_top_k(v, static_cast<int64_t>(at_row(*in[2], b)), kept);
    keep_top_p(v, round_to_dtype(at_row(*in[3], b), DType::f32), kept);
    std::vector<double> z(v.size());
    for (int64_t t = 0; t < vocab; ++t) {
      const double u = sampling::uniform(
          sampling::token_bits(seed, step, static_cast<uint32_t>(b), static_cast<uint32_t>(t)));
      z[t] = v[t] - std::log(-std::log(u));
    }
    out.data[b] = static_cast<double>(first_argmax(z, kept));
  }
  return out;
}

std::vector<OpSample> sample_samples() {
  auto s = [](std::string label, Shape logits, DType dtype, double spread, bool per_row,
              std::pair<double, double> temperature, std::pair<double, double> top_k,
              std::pair<double, double> top_p) {
    const Shape p = per_row ? Shape{logits[0]} : Shape{};
    return OpSample{
        .label = std::move(label),
        .inputs = {{logits, dtype},
                   {p, DType::f32},
                   {p, DType::i32},
                   {p, DType::f32},
                   {{}, DType::u32},
                   {{}, DType::i32}},
        .ranges = {{-spread, spread}, temperature, top_k, top_p, {0.0, 1e9}, {0.0, 1e4}},
        .no_grad = {true, true, true, true, true, true}};
  };
  return {s("per_row", {4, 12}, DType::f32, 3.0, true, {0.5, 1.5}, {0.0, 13.0}, {0.2, 1.0}),
          s("scalars_f16", {2, 300}, DType::f16, 4.0, false, {0.7, 1.3}, {0.0, 60.0}, {0.5, 0.95}),
          s("greedy", {3, 50}, DType::f32, 5.0, false, {0.0, 0.0}, {0.0, 5.0}, {0.5, 1.0}),
          s("wide", {1, 5000}, DType::f32, 8.0, false, {0.8, 1.0}, {0.0, 1.0}, {0.9, 0.99})};
}

}  // namespace
}  // namespace ops

void register_sampling_ops(OpRegistry& r) {
  r.add(OpDef{
      .name = std::string(ops::kSample),
      .arity = 6,
      .archetype = Archetype::reduction,
      .differentiable = false,
      .infer = ops::infer_sample,
      .eval = ops::eval_sample,
      .samples = ops::sample_samples,
      .summary = "token ids [B] from logits [B, V]: temperature, top-k, top-p (HF order), seeded",
  });
}

Tensor sample_tokens(Tensor logits, Tensor temperature, Tensor top_k, Tensor top_p, Tensor seed,
                     Tensor step) {
  const std::array<std::pair<Tensor, const char*>, 6> operands{{{logits, "logits"},
                                                                {temperature, "temperature"},
                                                                {top_k, "top_k"},
                                                                {top_p, "top_p"},
                                                                {seed, "seed"},
                                                                {step, "step"}}};
  for (const auto& [t, name] : operands) ops::require_tensor(t, ops::kSample, name);
  return logits.graph().apply(ops::kSample, NoAttrs{},
                              {logits, temperature, top_k, top_p, seed, step});
}

}  // namespace mn
