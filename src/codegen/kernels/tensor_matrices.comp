// What kernels on tensor-addressed workgroup-scope matrices share (filled by
// codegen/tensor_loads.cpp after a kernel's declarations): the matrix types, with operands of
// type ELEM and f32 accumulators, the clamped and unclamped layouts of a run of rows, and the
// per-element rounding to bf16.
#define ELEM @ELEM@
#define ACC(r, c) coopmat<float, gl_ScopeWorkgroup, r, c, gl_MatrixUseAccumulator>
#define MAT_A(r, c) coopmat<ELEM, gl_ScopeWorkgroup, r, c, gl_MatrixUseA>
#define MAT_B(r, c) coopmat<ELEM, gl_ScopeWorkgroup, r, c, gl_MatrixUseB>
#define CLAMPED tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>
#define UNCLAMPED tensorLayoutNV<2>

// v rounded to the nearest bf16 (the matrices' conversion truncates).
float to_bf16(const in uint32_t r, const in uint32_t c, const in float v) {
  return uintBitsToFloat(mn_f32_to_bf16(v) << 16);
}

// Rows [0, rows) of a [*, width] operand from a load's element offset, zeros past them.
CLAMPED rows_layout(uint rows, uint width) {
  CLAMPED l = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  l = setTensorLayoutDimensionNV(l, rows, width);
  return setTensorLayoutStrideNV(l, width, 1);
}

// The same rows unclamped, for slices wholly inside them (no bounds checks in the loads).
UNCLAMPED inner_rows_layout(uint rows, uint width) {
  UNCLAMPED l = createTensorLayoutNV(2);
  l = setTensorLayoutDimensionNV(l, rows, width);
  return setTensorLayoutStrideNV(l, width, 1);
}
