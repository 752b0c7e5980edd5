#include "support/random_fill.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mn::testing {

std::mt19937_64 rng_for(std::string_view name) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return std::mt19937_64(h);
}

Array random_array(std::mt19937_64& rng, const TensorType& type, double lo, double hi) {
  Array a(type.shape, type.dtype);
  if (is_float(type.dtype)) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (double& v : a.data) v = round_to_dtype(d(rng), type.dtype);
  } else {
    std::uniform_int_distribution<int64_t> d(
        static_cast<int64_t>(lo),
        std::max<int64_t>(static_cast<int64_t>(lo), static_cast<int64_t>(hi) - 1));
    for (double& v : a.data) v = static_cast<double>(d(rng));
  }
  return a;
}

double relative_error(const Array& a, const Array& b) {
  if (a.data.size() != b.data.size()) throw std::runtime_error("relative_error: size mismatch");
  double num = 0, den = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    double x = a.data[i], y = b.data[i];
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (std::isnan(x)) continue;
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return INFINITY;
      continue;
    }
    num = std::max(num, std::abs(x - y));
    den = std::max(den, std::abs(y));
  }
  return num / (1.0 + den);
}

std::shared_ptr<Dataset> random_classification(std::mt19937_64& rng, int64_t n, const Shape& sample_shape,
                                               float scale, int classes) {
  auto d = std::make_shared<Dataset>();
  d->sample_shape = sample_shape;
  std::uniform_real_distribution<float> u(0, scale);
  d->inputs.resize(static_cast<size_t>(n * numel(sample_shape)));
  for (float& v : d->inputs) v = u(rng);
  for (int64_t i = 0; i < n; ++i) d->labels.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(classes)));
  for (int i = 0; i < classes; ++i) d->class_names.push_back("c" + std::to_string(i));
  return d;
}

double scaled_error(const Array& a, const Array& b) {
  if (a.data.size() != b.data.size()) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < b.data.size(); ++i) {
    const double d = std::abs(a.data[i] - b.data[i]);
    if (!std::isfinite(d)) return INFINITY;
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(b.data[i]));
  }
  return diff / std::max(scale, 1e-300);
}

}  // namespace mn::testing
