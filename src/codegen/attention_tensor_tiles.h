#pragma once
// The workgroup-scope matrices of attention's tensor-addressed kernels
// (lower_attention_tensor.h, lower_attention_training_tensor.h): a workgroup owns 64 rows and
// walks the other side in blocks of 64, its matrices R × D, R × DV, R × 64 and their blocks.
#include <array>
#include <cstdint>

#include "codegen/kernel.h"

namespace mn::codegen {

constexpr uint64_t kTensorAttentionRows = 64;

// Workgroups of 128 invocations up to heads of 64, 256 above (the registers of a 64 × 128
// accumulator and its operands would not fit 128 invocations).
uint32_t tensor_attention_invocations(uint64_t d, uint64_t dv);

// Whether heads of d (queries, keys) and dv (values) elements suit the kernels: 16 to 128 in
// steps of 16, every matrix (R × R over K = d, dv or R, R × d and R × dv over K = R) in the
// device's workgroup-scope `granularity` (coop_wg_granularity or coop_wg_bf16_granularity).
bool tensor_attention_fits(uint64_t d, uint64_t dv,
                           const std::array<std::array<uint32_t, 3>, 4>& granularity,
                           const DeviceTraits& device);

}  // namespace mn::codegen
