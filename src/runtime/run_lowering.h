#pragma once
// One lowering run alone on a device, outside any session: its operands uploaded, its launches
// recorded and submitted once, its output read back. For the tensor-core self-test and the
// conformance tests, which check one kernel at a time against exact values.
#include <span>
#include <vector>

#include <meganeura/dtype.h>

#include "codegen/kernel.h"
#include "codegen/shader/shader_compiler.h"
#include "vulkan/device.h"

namespace mn::runtime {

// `inputs[i]` holds the values of operand i, encoded to `input_dtypes[i]`; the result is the
// output (of `output_elements` elements of `output_dtype`) decoded to doubles. Pipelines are
// compiled with `options` (its name is set per kernel). Throws mn::Error (or a device error)
// when a kernel fails to compile or run, or the validation layer reported a message, and
// mn::IndexError when a kernel met an out-of-range index (codegen/index_check.h).
std::vector<double> run_lowering(vk::Device& dev, const codegen::Lowering& lowering,
                                 std::span<const std::vector<double>> inputs,
                                 std::span<const DType> input_dtypes, int64_t output_elements,
                                 DType output_dtype, codegen::CompileOptions options);

}  // namespace mn::runtime
