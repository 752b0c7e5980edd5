#pragma once
// Random test data with a fixed seed per test case.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include <memory>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

namespace mn::testing {

// A generator seeded from a name, so each test case has its own reproducible stream.
std::mt19937_64 rng_for(std::string_view name);

// Uniform values in [lo, hi); integer dtypes draw integers in [lo, hi).
Array random_array(std::mt19937_64& rng, const TensorType& type, double lo = -1.0, double hi = 1.0);

// Inputs of a test graph with random values: input(name, shape[, dtype]) adds the input to
// `g` and its values, drawn from `rng` in the order the inputs are made, to `feeds`.
struct RandomInputs {
  Graph& g;
  reference::Feeds& feeds;
  std::mt19937_64 rng;
  Tensor operator()(const std::string& name, Shape shape, DType dtype = DType::f32) {
    Tensor t = g.input(name, std::move(shape), dtype);
    feeds[name] = random_array(rng, t.type());
    return t;
  }
};

// A classification data set drawn from `rng`: n samples of `sample_shape` uniform in
// [0, scale) (all inputs first), then n labels uniform over `classes` named "c0", "c1", ...
std::shared_ptr<Dataset> random_classification(std::mt19937_64& rng, int64_t n, const Shape& sample_shape,
                                               float scale = 1.0f, int classes = 10);

// max |a - b| / (1 + max |b|): absolute below 1, so it suits only values of order one (CPU
// evaluations against PyTorch's); GPU results against the reference are compared element by
// element (support/elementwise_error.h).
double relative_error(const Array& a, const Array& b);
// max |a - b| / max |b|: an error relative to the reference's scale (logits, whole outputs);
// infinite when the sizes differ or a value is not finite.
double scaled_error(const Array& a, const Array& b);

}  // namespace mn::testing
