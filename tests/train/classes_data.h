#pragma once
// A small classification data set the Trainer's tests share: learnable by a linear model.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>

#include <meganeura/tensor_data.h>

namespace mn::test {

inline constexpr int64_t kClassesIn = 6, kClassesOut = 3;

// n samples x [kClassesIn] and y whose class is the largest of the first three features.
inline std::shared_ptr<TensorDataset> classes_data(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> u(0, 1);
  Array x({n, kClassesIn}, DType::f32), y({n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < kClassesIn; ++j) {
      x.data[static_cast<size_t>(i * kClassesIn + j)] = u(rng);
    }
    const double* row = x.data.data() + i * kClassesIn;
    y.data[static_cast<size_t>(i)] = static_cast<double>(std::max_element(row, row + 3) - row);
  }
  auto d = std::make_shared<TensorDataset>();
  d->add("x", x);
  d->add("y", y);
  return d;
}

}  // namespace mn::test
