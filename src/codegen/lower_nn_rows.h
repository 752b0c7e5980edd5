#pragma once
// Row kernels shared by the nn-family lowerings (softmax, log_softmax, layer_norm, rms_norm,
// group_norm, batch_norm in training). Each op is a set of rows: per row two statistics from
// reductions over its elements, then an epilogue mapping every element of the row with them.
//
// A row is walked by one thread (short or strided rows with many of them) or by one workgroup
// (the lanes split the row and combine through shared memory). Few long rows (e.g. batch_norm's
// channels) split further: partial statistics per (row, chunk), one thread per row combining
// them, then an elementwise pass writing the output.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel.h"

namespace mn::codegen::nn_lowering {

// Which two statistics (a, b) the epilogue receives.
enum class RowStats {
  softmax,   // a = max, b = sum of exp(x - max) (NaN ignored by the max, as the reference does)
  centered,  // a = mean, b = 1 / sqrt(biased variance + eps)
  rms,       // a = 0, b = 1 / sqrt(mean(x^2) + eps)
};

struct RowOp {
  std::string name;
  RowStats stats = RowStats::softmax;
  double eps = 0.0;  // added to the variance (centered, rms); already rounded to x's dtype
  uint64_t rows = 1, n = 1;
  // Consecutive elements of a row are adjacent in memory (or in runs long enough to coalesce).
  bool contiguous = true;
  // GLSL expressions: the offset of element j of row r in x and in the output (in `r`, `j`), and
  // the inverse map from an offset `e` to its row and position in the row.
  std::string elem, row_of, col_of;
  // Further node inputs read by the epilogue (gamma, beta): input index and buffer name; they
  // are bound after x, in this order.
  std::vector<std::pair<int, std::string>> params;
  // Body of `float epilogue(float x, uint r, uint j, uint e, float a, float b)`.
  std::string epilogue;
};

Lowering lower_rows(const LowerContext& ctx, const RowOp& op);

}  // namespace mn::codegen::nn_lowering
