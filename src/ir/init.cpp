#include <cmath>
#include <numbers>

#include <meganeura/error.h>
#include <meganeura/graph.h>

#include "ir/random.h"

namespace mn {

namespace {

std::pair<double, double> fans(const Shape& s) {
  if (s.empty()) return {1, 1};
  if (s.size() == 1) return {double(s[0]), double(s[0])};
  if (s.size() == 2) return {double(s[0]), double(s[1])};
  double receptive = 1;
  for (size_t i = 2; i < s.size(); ++i) receptive *= double(s[i]);
  return {double(s[1]) * receptive, double(s[0]) * receptive};
}

// Standard normal from two uniforms (Box-Muller), one value per index.
double normal01(uint64_t seed, uint64_t i) {
  double u1 = 1.0 - random_uniform(seed, 2 * i);  // (0, 1]
  double u2 = random_uniform(seed, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

Array initialize(const Init& init, const Shape& shape, DType dtype) {
  Array out(shape, dtype);
  auto [fan_in, fan_out] = fans(shape);
  auto fill_uniform = [&](double lo, double hi) {
    for (size_t i = 0; i < out.data.size(); ++i) {
      out.data[i] = lo + (hi - lo) * random_uniform(init.seed, i);
    }
  };
  auto fill_normal = [&](double mean, double stddev) {
    for (size_t i = 0; i < out.data.size(); ++i) {
      out.data[i] = mean + stddev * normal01(init.seed, i);
    }
  };
  switch (init.kind) {
    case Init::Kind::zeros:
      break;
    case Init::Kind::ones:
      std::fill(out.data.begin(), out.data.end(), 1.0);
      break;
    case Init::Kind::constant:
      std::fill(out.data.begin(), out.data.end(), init.a);
      break;
    case Init::Kind::normal:
      fill_normal(init.a, init.b);
      break;
    case Init::Kind::uniform:
      fill_uniform(init.a, init.b);
      break;
    case Init::Kind::kaiming_normal: {
      double gain = std::sqrt(2.0 / (1.0 + init.a * init.a));
      fill_normal(0.0, gain / std::sqrt(fan_in));
      break;
    }
    case Init::Kind::kaiming_uniform: {
      double gain = std::sqrt(2.0 / (1.0 + init.a * init.a));
      double bound = gain * std::sqrt(3.0 / fan_in);
      fill_uniform(-bound, bound);
      break;
    }
    case Init::Kind::xavier_normal:
      fill_normal(0.0, init.a * std::sqrt(2.0 / (fan_in + fan_out)));
      break;
    case Init::Kind::xavier_uniform: {
      double bound = init.a * std::sqrt(6.0 / (fan_in + fan_out));
      fill_uniform(-bound, bound);
      break;
    }
    case Init::Kind::normal_zero_row: {
      fill_normal(0.0, init.b);
      const int64_t row = static_cast<int64_t>(init.a);
      if (!shape.empty() && row >= 0 && row < shape[0]) {
        const auto width = static_cast<size_t>(out.numel() / shape[0]);
        std::fill_n(out.data.begin() + static_cast<ptrdiff_t>(row) * static_cast<ptrdiff_t>(width),
                    width, 0.0);
      }
      break;
    }
    case Init::Kind::sinusoids: {
      if (shape.size() != 2 || shape[1] < 4 || shape[1] % 2 != 0) {
        throw Error("Init::sinusoids: expected a [positions, channels] shape with an even number "
                    "of channels >= 4, got " + shape_str(shape));
      }
      const int64_t half = shape[1] / 2;
      const double step = std::log(init.a) / static_cast<double>(half - 1);
      for (int64_t p = 0; p < shape[0]; ++p) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(p) * std::exp(-step * static_cast<double>(i));
          out.data[static_cast<size_t>(p * shape[1] + i)] = std::sin(angle);
          out.data[static_cast<size_t>(p * shape[1] + half + i)] = std::cos(angle);
        }
      }
      break;
    }
  }
  for (double& v : out.data) v = round_to_dtype(v, dtype);
  return out;
}

}  // namespace mn
