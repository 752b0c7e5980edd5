#pragma once
// Element conversion between device dtypes straight from bytes to bytes, for uploading file
// data (f32/f16/bf16 checkpoints) without a double-precision copy of the tensor.
#include <cstddef>
#include <span>

#include <meganeura/dtype.h>

namespace mn::runtime {

// Converts in.size() / dtype_size(from) elements into `out` (dtype_size(to) bytes each):
// floats round to nearest even, NaN stays NaN; integers convert as Session::set does.
// mn::Error when the sizes disagree.
void convert_elements(std::span<const std::byte> in, DType from, std::span<std::byte> out,
                      DType to);

}  // namespace mn::runtime
