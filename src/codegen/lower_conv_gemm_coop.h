#pragma once
// The implicit GEMM (codegen/lower_conv_gemm.h) on workgroup-scope tensor cores: the operands
// are materialized once as scaled, zero-padded f16 copies (im2col for a convolution's input)
// by pack launches that evaluate the spec's a_at and b_at, the product runs on the
// workgroup-scope cooperative-matrix kernel (codegen/lower_matmul_coop_wg.h), and every result
// leaves through the spec's c_store. When the M×N tiles cannot fill the device, K is split
// and a second launch sums the partial tiles in a fixed order.
#include <optional>

#include "codegen/kernel.h"
#include "codegen/lower_conv_gemm.h"

namespace mn::codegen {

// nullopt where the portable implicit GEMM runs instead: no workgroup-scope tile on the
// device, fewer than 2^24 multiply-adds, K below 512 or 1/M + 1/N at least 9e-3 (measured:
// the packing then costs more than the tensor cores save), or MN_CONV_COOP=0.
std::optional<Lowering> lower_implicit_gemm_coop(const ImplicitGemm& spec, const DeviceTraits& d);

}  // namespace mn::codegen
