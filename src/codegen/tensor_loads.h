#pragma once
// Tensor-addressed loads of a kernel's operands into workgroup-scope matrices
// (GL_NV_cooperative_matrix2): a typed view of the operand's binding, `<name>_t[]`, and the
// macros LOAD_<name>(m, use, rows, cols, offset, slice) and LOAD_T_<name>(...) (through the
// kernel's `transposed` view) that fill the rows × cols matrix `m` of use `use` and component
// type `matrix` from the tensor layout slice `slice` at element `offset`. An operand stored in
// `matrix`'s type loads as it is; others load as f32 accumulators and are converted, rounded to
// nearest first where `matrix` is bf16 (the matrices' conversion to bf16 truncates). The kernel
// defines ACC(rows, cols), its f32 accumulator type, and, for bf16 matrices,
// `float to_bf16(uint32_t, uint32_t, float)` (per-element rounding).
#include <cstdint>
#include <string>

#include <meganeura/dtype.h>

namespace mn::codegen {

std::string tensor_operand_loads(uint32_t binding, DType stored, const std::string& name,
                                 DType matrix);

// GLSL: the per-element function to_bf16 the loads of bf16 matrices call.
std::string bf16_rounding_function();

}  // namespace mn::codegen
