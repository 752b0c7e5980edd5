#pragma once
// What a module's forward() checks of its input before building ops, so a wrong input names the
// module ("Linear 'layers.0': ...") rather than only the op it would have failed in.
#include <string>

#include <meganeura/graph.h>
#include <meganeura/nn.h>

namespace mn::nn {

inline void require_input(const Module& m, const Tensor& x, const char* what = "input") {
  if (!x.valid()) throw Error(m.where() + ": the " + std::string(what) + " is an invalid Tensor");
}

inline void require_rank(const Module& m, const Tensor& x, int rank, const std::string& layout) {
  require_input(m, x);
  if (x.rank() != rank) {
    throw ShapeError(m.where() + ": expected a " + std::to_string(rank) + "-D input " + layout +
                     ", got " + x.type().str());
  }
}

inline void require_float(const Module& m, const Tensor& x) {
  if (!is_float(x.dtype())) {
    throw ShapeError(m.where() + ": expected a float input, got " + x.type().str());
  }
}

inline void require_positive(const Module& m, int64_t v, const char* field) {
  if (v < 1) {
    throw Error(m.where() + ": " + std::string(field) + " is " + std::to_string(v) +
                ", expected >= 1");
  }
}

}  // namespace mn::nn
