#version 450
// Matmul on workgroup-scope cooperative matrices with tensor-addressed loads and stores
// (GL_NV_cooperative_matrix2; filled by codegen/lower_matmul_tensor.cpp, compiled with the
// current glslang). One workgroup computes a BM×BN tile of C = A·B for one batch entry: every
// K step loads a BM×BK matrix of A and a BK×BN matrix of B through tensor layouts, which the
// driver turns into bulk copies, and multiply-adds them into one f32 accumulator. Tiles that lie
// wholly inside the operands use unclamped layouts; edge tiles read zeros past the extents
// through clamped ones. The result goes through the epilogue per element (mm_epilogue) and is
// written by the matrix store in C's dtype (f32 or f16), clamped at the edges.
// Split K (SPLIT_K > 1, for grids too small to fill the device): SPLITS workgroups share a tile,
// each over KS of K; each stores its f32 partial into P, and the last to finish (counted in
// done[], which it sets back to zero for the next run) adds every split's partial in split order
// (its own from registers) and finishes the tile. One launch, no second pass.
// Permuted store (PERMUTED_STORE, schedule/permuted_stores.h): C reshaped and permuted, as a
// permute of it alone reads it (attention's gradients split into heads), each tile stored
// through a layout of its own rows' stride.
// Sibling (SIBLING, a prompt's gate and up projections): A's matrices also multiply S's, a
// matrix of B's shape, into a second accumulator, which the epilogue reads as mm_sibling through
// shared memory.
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
@EXTENSIONS@
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

#define TA @TA@      // A stored K×M
#define TB @TB@      // B stored N×K
#define EPILOGUE @EPILOGUE@  // mm_epilogue applies to each element before the store
#define ROUND_BF16 @ROUND_BF16@  // C is bf16: round to nearest before the conversion
#define SIBLING @SIBLING@    // a second product of A with S (B's shape) for the epilogue
#define PERMUTED_STORE @PERMUTED_STORE@  // C is stored reshaped and permuted (c_stored)
const uint C_ROW_STRIDE = @C_ROW_STRIDE@u;

const uint M = @M@u, N = @N@u, K = @K@u;
const uint LDA = @LDA@u, LDB = @LDB@u;
const uint BM = @BM@u, BN = @BN@u, BK = @BK@u, UNROLL = @UNROLL@u;
const uint ROW_TILES = @ROW_TILES@u, COL_TILES = @COL_TILES@u, BATCHES = @BATCHES@u;
#define SPLIT_K @SPLITS@  // K splits (1: none)
const uint SPLITS = @SPLITS@u, KS = @KS@u;  // and the K range of each

layout(std430, set = 0, binding = 0) readonly buffer BufferA { @A_TYPE@ A[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufferB { @B_TYPE@ B[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufferC { @C_TYPE@ C[]; };
#if SIBLING
// The sibling's matrix, and its accumulator for the epilogue, which reads element (m, n) of the
// product as mm_sibling (tiles start at multiples of BM and BN), rounded as its store would.
layout(std430, set = 0, binding = @S_BINDING@) readonly buffer BufferS { @B_TYPE@ S[]; };
shared float sibling_sh[BM * BN];
@SIBLING_CONVERSIONS@
float sibling_value(const float v) { return @SIBLING_VALUE@; }
#define mm_sibling sibling_value(sibling_sh[(m % BM) * BN + n % BN])
#endif
@EPILOGUE_DECLARATIONS@
@C_STORED@
@SPLIT_PARTS@

#define MAT_A coopmat<@MAT_TYPE@, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<@MAT_TYPE@, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

#if ROUND_BF16
// v rounded to the nearest bf16 (ties to even), as every other kernel stores bf16: the
// driver's f32-to-bf16 matrix conversion truncates (measured on the H200), and truncating a
// value bf16 already represents is exact. NaNs stay NaN (truncation could make one infinite).
float round_to_bf16(float v) {
  const uint b = floatBitsToUint(v);
  if ((b & 0x7f800000u) == 0x7f800000u) {
    return (b & 0x007fffffu) != 0u ? uintBitsToFloat((b & 0x80000000u) | 0x7fc00000u) : v;
  }
  return uintBitsToFloat((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
}
#endif

#if EPILOGUE || ROUND_BF16
// Element (r, c) of the tile at (row0, col0) of batch entry bz through the epilogue and the
// rounding of a bf16 result; the matrix store then writes the tile. Every element's operands are
// read before any of the tile is stored (they may alias C at the same index).
float finish_element(const in uint32_t r, const in uint32_t c, const in float v,
                     const in uint bz, const in uint row0, const in uint col0) {
  float x = v;
#if EPILOGUE
  const uint gm = row0 + r, gn = col0 + c;
  if (gm < M && gn < N) x = mm_epilogue(v, bz, gm, gn);
#endif
#if ROUND_BF16
  x = round_to_bf16(x);
#endif
  return x;
}
#endif

void main() {
  const uint wid = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (wid >= ROW_TILES * COL_TILES * BATCHES * SPLITS) return;
  const uint split = wid / (ROW_TILES * COL_TILES * BATCHES);
  const uint tile_id = wid % (ROW_TILES * COL_TILES * BATCHES);
  const uint bz = tile_id / (ROW_TILES * COL_TILES), tile = tile_id % (ROW_TILES * COL_TILES);
  const uint k_begin = split * KS, k_end = min(K, k_begin + KS);
  // Groups of up to 8 row tiles walk the column tiles together (L2 reuse of B).
  const uint group = tile / (8u * COL_TILES), in_group = tile % (8u * COL_TILES);
  const uint rows_in = min(8u, ROW_TILES - group * 8u);
  const uint row0 = (group * 8u + in_group % rows_in) * BM, col0 = (in_group / rows_in) * BN;
@BATCH_SETUP@
  const uint a_base = @A_BASE@, b_base = @B_BASE@;

  tensorLayoutNV<2> la = createTensorLayoutNV(2);
  tensorLayoutNV<2> lb = createTensorLayoutNV(2);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la_clamped =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb_clamped =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
#if TA
  la = setTensorLayoutDimensionNV(la, K, M);
  la_clamped = setTensorLayoutDimensionNV(la_clamped, K, M);
#define SLICE_A(l, k) sliceTensorLayoutNV(l, k, BK, row0, BM), transposed
#else
  la = setTensorLayoutDimensionNV(la, M, K);
  la_clamped = setTensorLayoutDimensionNV(la_clamped, M, K);
#define SLICE_A(l, k) sliceTensorLayoutNV(l, row0, BM, k, BK)
#endif
#if TB
  lb = setTensorLayoutDimensionNV(lb, N, K);
  lb_clamped = setTensorLayoutDimensionNV(lb_clamped, N, K);
#define SLICE_B(l, k) sliceTensorLayoutNV(l, col0, BN, k, BK), transposed
#else
  lb = setTensorLayoutDimensionNV(lb, K, N);
  lb_clamped = setTensorLayoutDimensionNV(lb_clamped, K, N);
#define SLICE_B(l, k) sliceTensorLayoutNV(l, k, BK, col0, BN)
#endif
  la = setTensorLayoutStrideNV(la, LDA, 1);
  la_clamped = setTensorLayoutStrideNV(la_clamped, LDA, 1);
  lb = setTensorLayoutStrideNV(lb, LDB, 1);
  lb_clamped = setTensorLayoutStrideNV(lb_clamped, LDB, 1);

  MAT_C acc = MAT_C(0.0);
  // One K step: A's and B's matrices (and the sibling's S, of B's layout) loaded through the
  // layouts given, then multiplied into the accumulators.
#if SIBLING
  MAT_C acc_s = MAT_C(0.0);
#define DECLARE_STEP(a, b, s) MAT_A a; MAT_B b; MAT_B s
#define LOAD_STEP(a, b, s, la_, lb_, k)                       \
  coopMatLoadTensorNV(a, A, a_base, SLICE_A(la_, k));         \
  coopMatLoadTensorNV(b, B, b_base, SLICE_B(lb_, k));         \
  coopMatLoadTensorNV(s, S, b_base, SLICE_B(lb_, k))
#define MUL_STEP(a, b, s)          \
  acc = coopMatMulAdd(a, b, acc);  \
  acc_s = coopMatMulAdd(a, s, acc_s)
#else
#define DECLARE_STEP(a, b, s) MAT_A a; MAT_B b
#define LOAD_STEP(a, b, s, la_, lb_, k)                       \
  coopMatLoadTensorNV(a, A, a_base, SLICE_A(la_, k));         \
  coopMatLoadTensorNV(b, B, b_base, SLICE_B(lb_, k))
#define MUL_STEP(a, b, s) acc = coopMatMulAdd(a, b, acc)
#endif
  if (row0 + BM <= M && col0 + BN <= N && K % BK == 0) {
    // UNROLL steps per iteration give the driver loads to issue ahead of the products.
    uint k = k_begin;
    for (; k + UNROLL * BK <= k_end; k += UNROLL * BK) {
      [[unroll]] for (uint j = 0; j < UNROLL; ++j) {
        DECLARE_STEP(a, b, s);
        LOAD_STEP(a, b, s, la, lb, k + j * BK);
        MUL_STEP(a, b, s);
      }
    }
    for (; k < k_end; k += BK) {
      DECLARE_STEP(a, b, s);
      LOAD_STEP(a, b, s, la, lb, k);
      MUL_STEP(a, b, s);
    }
  } else {
    for (uint k = k_begin; k < k_end; k += BK) {
      DECLARE_STEP(a, b, s);
      LOAD_STEP(a, b, s, la_clamped, lb_clamped, k);
      MUL_STEP(a, b, s);
    }
  }
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lc = setTensorLayoutDimensionNV(lc, M, N);
  lc = setTensorLayoutStrideNV(lc, N, 1);
#if SPLIT_K > 1
  // Partial s of batch entry bz at P[(s * BATCHES + bz) * M * N], laid out as C.
  coopMatStoreTensorNV(acc, P, (split * BATCHES + bz) * (M * N),
                       sliceTensorLayoutNV(lc, row0, BM, col0, BN));
  if (!last_to_finish(tile_id, SPLITS)) return;
  // Every split's partial added in split order, whichever finished last (0 + x is exact): a
  // step gives the same bits every run, as the scalar kernel's splits do (exact resume).
  MAT_C total = MAT_C(0.0);
  for (uint s = 0u; s < SPLITS; ++s) {
    if (s == split) {
      total += acc;
      continue;
    }
    MAT_C part;
    coopMatLoadTensorNV(part, P, (s * BATCHES + bz) * (M * N),
                        sliceTensorLayoutNV(lc, row0, BM, col0, BN));
    total += part;
  }
  acc = total;
#endif
#if SIBLING
  // The epilogue reads the sibling's product at its element (mm_sibling) from shared memory.
  coopMatStore(acc_s, sibling_sh, 0u, BN, gl_CooperativeMatrixLayoutRowMajor);
  barrier();
#endif
#if EPILOGUE || ROUND_BF16
  coopMatPerElementNV(acc, acc, finish_element, bz, row0, col0);
#endif
  coopmat<@C_TYPE@, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> c_tile =
      coopmat<@C_TYPE@, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
#if PERMUTED_STORE
  // The tile lies in the stored tensor (C reshaped and permuted) as a block whose rows are
  // C_ROW_STRIDE apart and whose columns are adjacent: tiles never cross its last axis.
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ls =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  ls = setTensorLayoutDimensionNV(ls, min(BM, M - row0), min(BN, N - col0));
  ls = setTensorLayoutStrideNV(ls, C_ROW_STRIDE, 1);
  coopMatStoreTensorNV(c_tile, C, c_stored(bz * (M * N) + row0 * N + col0),
                       sliceTensorLayoutNV(ls, 0, BM, 0, BN));
#else
  coopMatStoreTensorNV(c_tile, C, bz * (M * N), sliceTensorLayoutNV(lc, row0, BM, col0, BN));
#endif
}
