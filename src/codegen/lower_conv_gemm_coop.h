#pragma once
// The implicit GEMM (codegen/lower_conv_gemm.h) on workgroup-scope tensor cores: the operands
// are materialized once as scaled, zero-padded f16 copies (im2col for a convolution's input)
// by pack launches that evaluate the spec's a_at and b_at, the product runs on the
// workgroup-scope cooperative-matrix kernel (codegen/lower_matmul_coop_wg.h), and every result
// leaves through the spec's c_store. When the M×N tiles cannot fill the device, K is split
// and a second launch sums the partial tiles in a fixed order.
#include <optional>

#include <string>

#include "codegen/kernel.h"
#include "codegen/lower_conv_gemm.h"
#include "codegen/lower_matmul_coop.h"

namespace mn::codegen {

// One operand as packed: rows × cols logical (A: M × K, B: K × N), stored `k_fast` with K
// contiguous, padded to rows_p × cols_p.
struct Packed {
  int64_t rows = 0, cols = 0, rows_p = 0, cols_p = 0;
  bool k_fast = false;
  bool k_is_cols = false;  // A: K is the column index; B: K is the row index
};

// The PackSource of one operand read through `fn` ("a_at" or "b_at", called as fn(g, row,
// col) with `body`): its packed values, and the values its scale comes from (the buffer
// `source` of `source_count` elements when named, else the operand itself).
PackSource pack_source(const ImplicitGemm& spec, const std::string& fn, const std::string& body,
                       const Packed& p, const std::string& source, int64_t source_count);

// nullopt where the portable implicit GEMM runs instead: no workgroup-scope tile on the
// device, fewer than 2^24 multiply-adds, K below 512 or 1/M + 1/N at least the spec's
// coop_max_pack_per_mac (9e-3 unless set; measured: the packing then costs more than the
// tensor cores save), or MN_CONV_COOP=0.
std::optional<Lowering> lower_implicit_gemm_coop(const ImplicitGemm& spec, const DeviceTraits& d);

}  // namespace mn::codegen
