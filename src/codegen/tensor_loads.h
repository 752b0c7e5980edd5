#pragma once
// What kernels on tensor-addressed workgroup-scope matrices (GL_NV_cooperative_matrix2) share:
// their declarations' extensions and matrix types (tensor_matrix_declarations), and loads of
// their operands into those matrices: a typed view of the operand's binding, `<name>_t[]`, and the
// macros LOAD_<name>(m, use, rows, cols, offset, slice) and LOAD_T_<name>(...) (through the
// kernel's `transposed` view) that fill the rows × cols matrix `m` of use `use` and component
// type `matrix` from the tensor layout slice `slice` at element `offset`. An operand stored in
// `matrix`'s type loads as it is; others load as f32 accumulators and are converted, rounded to
// nearest first where `matrix` is bf16 (the matrices' conversion to bf16 truncates); they use
// ACC and to_bf16 of tensor_matrix_declarations.
#include <cstdint>
#include <string>

#include <meganeura/dtype.h>

namespace mn::codegen {

std::string tensor_operand_loads(uint32_t binding, DType stored, const std::string& name,
                                 DType matrix);

// `declarations` (a kernel's header, buffers and sizes) made ready for tensor-addressed
// workgroup matrices of `matrix` (bf16 or f16) operands: the extensions they need, the half-float
// conversions, and kernels/tensor_matrices.comp (ELEM, ACC, MAT_A, MAT_B, CLAMPED, UNCLAMPED,
// to_bf16, rows_layout, inner_rows_layout).
std::string tensor_matrix_declarations(std::string declarations, DType matrix);

}  // namespace mn::codegen
