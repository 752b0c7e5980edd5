#pragma once
// The cache family (cache.cpp): the view of cache_write's operands that inference, the
// reference and the GPU lowering share.
#include <cstdint>
#include <span>

#include <meganeura/graph.h>

namespace mn::ops::cache_detail {

struct CacheWriteView {
  int64_t t = 0;     // cache rows per leading index
  int64_t d = 0;     // row length
  int64_t l = 0;     // updates per leading index
  int64_t rows = 1;  // leading indices (product of the leading axes)
  // Consecutive leading indices that read one row of positions (the product of the leading
  // axes the positions do not have).
  int64_t rows_per_position_row = 1;
};

// Checks the operand types (mn::ShapeError naming cache_write) and returns the view.
CacheWriteView cache_write_view(std::span<const TensorType> in);

}  // namespace mn::ops::cache_detail
