#pragma once
// The implicit GEMM (codegen/lower_conv_gemm.h) on subgroup-scope tensor cores with its
// operands staged through shared memory: each K step, the workgroup evaluates a_at and b_at
// over the step's slabs, scales them by a power of two from the operand's largest magnitude,
// converts them to f16 and stores them in shared memory, from where the subgroups load their
// 16×16 fragments. Nothing is materialized: no im2col copy, no packed operand; one launch per
// operand finds its largest magnitude (as the packing path's does), and where the tiles alone
// cannot fill the device K is split and a last launch sums the partial products.
#include <optional>

#include "codegen/kernel.h"
#include "codegen/lower_conv_gemm.h"

namespace mn::codegen {

// nullopt where the kernel cannot run this GEMM: no subgroup tile on the device (coop,
// coop_tiles, a subgroup of 32), fewer than 2^24 multiply-adds, M or N below 16, or too many
// bindings for the device. Whether it should is lower_implicit_gemm's choice
// (DeviceTraits::conv_staged, ImplicitGemm::staged_when_unpacked).
std::optional<Lowering> lower_implicit_gemm_staged(const ImplicitGemm& spec, const DeviceTraits& d);

}  // namespace mn::codegen
