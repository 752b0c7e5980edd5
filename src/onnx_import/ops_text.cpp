// TfIdfVectorizer on integer tokens: for every n-gram length in [min_gram_length,
// max_gram_length] and every skip up to max_skip_count (unigrams once), the windows of the
// input compared with the whole pool of that length at once ([N, windows, pool] matches), the
// matches counted per pool entry, and the counts placed at their ngram_indexes (weighted for
// IDF and TFIDF) by one product with a constant [pool, output] matrix.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

// The pool's n-grams of each length: pool[counts[n-1] : counts[n]] in groups of n.
struct Pool {
  std::vector<std::vector<std::vector<int64_t>>> grams;  // [length - 1][gram][element]
};

Pool read_pool(NodeContext& c) {
  const std::vector<int64_t> values = c.attr_ints("pool_int64s");
  const std::vector<int64_t> counts = c.attr_ints("ngram_counts");
  if (values.empty()) c.unsupported("pool_strings (string tokens)");
  Pool p;
  for (size_t n = 1; n <= counts.size(); ++n) {
    const int64_t begin = counts[n - 1];
    const int64_t end = n < counts.size() ? counts[n] : static_cast<int64_t>(values.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(values.size()) ||
        (end - begin) % static_cast<int64_t>(n) != 0) {
      c.fail("ngram_counts does not divide pool_int64s into n-grams");
    }
    auto& grams = p.grams.emplace_back();
    for (int64_t i = begin; i < end; i += static_cast<int64_t>(n)) {
      grams.emplace_back(values.begin() + i, values.begin() + i + static_cast<int64_t>(n));
    }
  }
  for (int64_t v : values) {
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      c.unsupported("pool entries outside 32-bit integers");
    }
  }
  return p;
}

// [N, pool size of length n]: how often each n-gram occurs with each allowed skip.
Tensor count_grams(NodeContext& c, Tensor x, const std::vector<std::vector<int64_t>>& grams,
                   int64_t n, int64_t max_skip) {
  const int64_t len = x.dim(1), pool = static_cast<int64_t>(grams.size());
  std::optional<Tensor> total;
  for (int64_t skip = 0; skip <= (n == 1 ? 0 : max_skip); ++skip) {
    const int64_t windows = len - (n - 1) * (skip + 1);
    if (windows <= 0) break;
    c.host_limit(x.dim(0) * windows * pool, "the n-gram matches");
    std::optional<Tensor> match;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = k * (skip + 1);
      Tensor column = unsqueeze(slice(x, 1, at, at + windows), 2);  // [N, W, 1]
      std::vector<double> entry;
      for (const auto& g : grams) entry.push_back(static_cast<double>(g[static_cast<size_t>(k)]));
      Tensor hit = cast(eq(column, c.graph().constant(Array({1, 1, pool}, DType::i32, entry))),
                        DType::f32);
      match = match ? *match * hit : hit;
    }
    Tensor counts = sum(*match, {1});  // [N, pool]
    total = total ? *total + counts : counts;
  }
  return total ? *total : broadcast_to(c.graph().scalar(0.0), {x.dim(0), pool});
}

void convert_tfidf(NodeContext& c) {
  if (!is_integer(c.type(0))) c.unsupported(std::string("inputs of ") + elem_type_name(c.type(0)));
  Tensor x = c.in(0);
  const bool batched = x.rank() == 2;
  if (x.rank() != 1 && !batched) c.fail("input must be [C] or [N, C]");
  if (!batched) x = unsqueeze(x, 0);
  const std::string mode = c.attr_string("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") c.fail("mode must be TF, IDF or TFIDF");
  const int64_t lo = c.attr_int("min_gram_length", 0), hi = c.attr_int("max_gram_length", 0);
  const int64_t max_skip = c.attr_int("max_skip_count", 0);
  const Pool pool = read_pool(c);
  if (lo < 1 || hi < lo || hi > static_cast<int64_t>(pool.grams.size()) || max_skip < 0) {
    c.fail("min_gram_length and max_gram_length must satisfy 1 <= min <= max <= the pool's lengths");
  }
  const std::vector<int64_t> indexes = c.attr_ints("ngram_indexes");
  int64_t grams = 0;
  for (const auto& g : pool.grams) grams += static_cast<int64_t>(g.size());
  if (static_cast<int64_t>(indexes.size()) != grams) c.fail("ngram_indexes needs one index per n-gram");
  std::vector<float> weights = c.attr_floats("weights");
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != grams) {
    c.fail("weights needs one value per n-gram");
  }
  if (*std::min_element(indexes.begin(), indexes.end()) < 0) c.fail("ngram_indexes must not be negative");
  const int64_t outputs = *std::max_element(indexes.begin(), indexes.end()) + 1;
  c.host_limit(outputs, "the output row");
  c.host_limit(grams * outputs, "the output placement");
  // Counts of every pool n-gram in pool order (zero for lengths outside [lo, hi]).
  std::vector<Tensor> parts;
  for (int64_t n = 1; n <= static_cast<int64_t>(pool.grams.size()); ++n) {
    const auto& g = pool.grams[static_cast<size_t>(n - 1)];
    if (g.empty()) continue;
    parts.push_back(n >= lo && n <= hi
                        ? count_grams(c, x, g, n, max_skip)
                        : broadcast_to(c.graph().scalar(0.0), {x.dim(0), static_cast<int64_t>(g.size())}));
  }
  Tensor counts = parts.size() == 1 ? parts[0] : concat(parts, 1);
  if (mode == "IDF") counts = minimum(counts, c.scalar(1.0, counts));
  Array place({grams, outputs}, DType::f32);
  for (int64_t g = 0; g < grams; ++g) {
    const double w = mode == "TF" || weights.empty() ? 1.0 : weights[static_cast<size_t>(g)];
    place.data[static_cast<size_t>(g * outputs + indexes[static_cast<size_t>(g)])] = w;
  }
  Tensor y = matmul(counts, c.graph().constant(std::move(place)));
  c.out(0, batched ? y : reshape(y, {outputs}), ElemType::f32);
}

}  // namespace

void add_text_converters(ConverterTable& t) { t.add("TfIdfVectorizer", convert_tfidf); }

}  // namespace mn::onnx
