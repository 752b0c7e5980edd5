#pragma once
// Host values <-> device bytes of a dtype (little-endian, as every Vulkan device we target).
#include <cstddef>
#include <span>
#include <vector>

#include <meganeura/array.h>

namespace mn::runtime {

// Encodes `values` as `dtype` into `out` (dtype_size(dtype) bytes each); floats round to
// nearest even, integers truncate.
void encode(std::span<const double> values, DType dtype, std::span<std::byte> out);
void encode(std::span<const float> values, DType dtype, std::span<std::byte> out);
void encode(std::span<const int32_t> values, DType dtype, std::span<std::byte> out);
// Decodes `n` elements of `dtype`.
std::vector<double> decode(std::span<const std::byte> bytes, DType dtype, size_t n);

}  // namespace mn::runtime
