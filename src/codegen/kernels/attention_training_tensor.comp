@DECLARATIONS@
// Attention's gradient ops on workgroup-scope tensor cores (GL_NV_cooperative_matrix2, filled by
// codegen/lower_attention_training_tensor.cpp, compiled with the current glslang): the
// structure of FlashAttention-2's backward pass, the probabilities never leaving the matrices.
//
// A workgroup of WG invocations owns R rows of one head (codegen/attention_tensor_tiles.h): query
// rows for attention_grad_q, key rows of a key/value head for attention_grad_k and
// attention_grad_v. Its own rows (a: q or k; b: dout or
// v) are loaded once as bf16 A-matrices. It walks the other side in blocks of BK rows (the keys
// its queries see; the query rows of every query head of the group that see its keys, so the
// GQA sum happens here and no k or v is repeated), each loaded by tensor-addressed loads (the
// driver's bulk copies; rows past the head's read as zeros), and per block:
// - S = own_a · other_aᵀ on an f32 accumulator; P = exp(scaled S + mask - lse) per element,
//   0 where the query does not see the key;
// - dP = own_b · other_bᵀ; dS = P · (dP - delta), elementwise on the matrices;
// - result += weights · C, the weights (dS, or P for attention_grad_v) rounded to nearest bf16
//   and converted to an A-matrix in place, C the block's rows of k (dq), q (dk) or dout (dv).
// With WITH_DV, attention_grad_k also accumulates attention_grad_v's dV += P · dout from the
// same P and stores it as output 1. Results are stored per element (the output's dtype, rows
// past the head's skipped). No shared memory but the block's lse and delta: the matrices'
// softmax runs where the products leave their results.
// Split (SPLITS > 1, for grids too small to fill the device): a tile's blocks are walked in
// segments of SEGMENT blocks by up to SPLITS workgroups (those past the tile's blocks return at
// once); each stores its f32 result into P, and the last to finish (counted in done[], which it
// sets back to zero for the next run) adds every segment's result in segment order (its own from
// registers, the same bits every run) and finishes the tile, as the split matmul does
// (kernels/matmul_tensor.comp).
// Operands of other dtypes than bf16 load as f32 matrices rounded to nearest bf16 as they are
// converted, as the subgroup-matrix kernels round them (kernels/attention_training_coop.comp):
// both compute the same scores, so either may use the other's log-sum-exp.

#define GRAD_Q 1
#define GRAD_K 2
#define GRAD_V 3
#define FORM @FORM@
#define QUERY_OWN (FORM == GRAD_Q)
#define HAS_OWN_B (FORM != GRAD_V)  // dP = own_b · other_bᵀ
#define CAUSAL @CAUSAL@
#define HAS_MASK @HAS_MASK@
#define WITH_DV @WITH_DV@  // attention_grad_k storing attention_grad_v as output 1
// A block's every load issued at its start (DeviceTraits::tensor_attention_early_loads; unsplit
// kernels only).
#define EARLY_LOADS @EARLY_LOADS@

const uint R = @R@u, BK = @BK@u, WG = @WG@u;
const uint W = @W@u;  // result columns
const uint OWN_ROWS = @OWN_ROWS@u, OWN_HEADS = @OWN_HEADS@u, TILES = @TILES@u;
const uint GROUPS = @GROUPS@u;
#define SPLITS @SPLITS@
const uint SEGMENT = @SEGMENT@u;  // blocks a workgroup walks

@SPLIT_PARTS@

// The lse and delta of the rows the scores' rows (own queries) or columns (a block's queries)
// belong to.
shared float lse_sh[@SHARED_ROWS@];
shared float delta_sh[@SHARED_ROWS@];

@BLOCKS@

#if HAS_MASK
@MASK_FUNCTION@
#endif

@OPERAND_LOADS@

// Score (r, c) of the block's matrix, scaled and masked, as P = exp(s - lse); 0 where the query
// does not see the key or lies past its head's rows.
float probability(const in uint32_t r, const in uint32_t c, const in float raw, const in uint t0,
                  const in uint first, const in uint limit, const in uint h, const in uint mbatch) {
#if QUERY_OWN
  uint i = t0 + r, j = first + c;
  bool seen = i < OWN_ROWS && j < limit;
  float lse = lse_sh[r];
#else
  uint j = t0 + r, i = first + c;
  bool seen = j < OWN_ROWS && i < limit;
  float lse = lse_sh[c];
#endif
  if (!seen || (CAUSAL != 0 && j > i)) return 0.0;
#if HAS_MASK
  float s = scaled(raw) + mask_ld(mask_at(mbatch, h, i, j));
#else
  float s = scaled(raw);
#endif
  return s == -mn_inf() ? 0.0 : exp(s - lse);
}

float minus_delta(const in uint32_t r, const in uint32_t c, const in float dp) {
#if QUERY_OWN
  return dp - delta_sh[r];
#else
  return dp - delta_sh[c];
#endif
}

float scale_result(const in uint32_t r, const in uint32_t c, const in float v) { return scaled(v); }

// Row r of the tile into the output row t0 + r of the head at own_base; rows past the head's
// (zeros read past it) are not stored.
float store_result(const in uint32_t r, const in uint32_t c, const in float v,
                   const in uint own_base, const in uint t0) {
  if (t0 + r < OWN_ROWS && c < W) out_st((own_base + t0 + r) * W + c, v);
  return v;
}

#if WITH_DV
float store_dv(const in uint32_t r, const in uint32_t c, const in float v, const in uint own_base,
               const in uint t0) {
  if (t0 + r < OWN_ROWS && c < DV) out1_st((own_base + t0 + r) * DV + c, v);
  return v;
}
#endif

#if SPLITS > 1
// The tile's result in row-major matrices: its R × W result, then (WITH_DV) its R × DV values'.
UNCLAMPED partial_layout(uint width) { return inner_rows_layout(R, width); }

// Stores this segment's result at P, counts it, and returns whether this workgroup is the tile's
// last: then acc (and acc_v) hold the sum of every segment's result in segment order.
#if WITH_DV
#define SEGMENT_WIDTH (W + DV)
bool sum_segments(inout ACC(R, W) acc, inout ACC(R, DV) acc_v, uint g, uint split,
                  uint segments) {
#else
#define SEGMENT_WIDTH W
bool sum_segments(inout ACC(R, W) acc, uint g, uint split, uint segments) {
#endif
  const uint stride = R * SEGMENT_WIDTH;
  coopMatStoreTensorNV(acc, P, (split * GROUPS + g) * stride, partial_layout(W));
#if WITH_DV
  coopMatStoreTensorNV(acc_v, P, (split * GROUPS + g) * stride + R * W, partial_layout(DV));
#endif
  if (!last_to_finish(g, segments)) return false;
  ACC(R, W) total = ACC(R, W)(0.0);
#if WITH_DV
  ACC(R, DV) total_v = ACC(R, DV)(0.0);
#endif
  for (uint s = 0u; s < segments; ++s) {
    if (s == split) {
      total += acc;
#if WITH_DV
      total_v += acc_v;
#endif
      continue;
    }
    ACC(R, W) part;
    coopMatLoadTensorNV(part, P, (s * GROUPS + g) * stride, partial_layout(W));
    total += part;
#if WITH_DV
    ACC(R, DV) part_v;
    coopMatLoadTensorNV(part_v, P, (s * GROUPS + g) * stride + R * W, partial_layout(DV));
    total_v += part_v;
#endif
  }
  acc = total;
#if WITH_DV
  acc_v = total_v;
#endif
  return true;
}
#endif

void main() {
  uint wid = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (wid >= GROUPS * SPLITS) return;
  uint g = wid % GROUPS, split = wid / GROUPS;
  uint tid = gl_LocalInvocationIndex;
  uint head = g / TILES, tile = g % TILES;
#if CAUSAL != 0 && QUERY_OWN
  tile = TILES - 1u - tile;  // the query tiles that see the most keys start first
#endif
  uint t0 = tile * R;
  // This workgroup's segment of the tile's blocks; the tile's first segment runs even where it
  // has no block (its rows' results are zeros).
  uint blocks = block_count(t0);
  uint segments = max(1u, (blocks + SEGMENT - 1u) / SEGMENT);
  if (split >= segments) return;
  uint first_block = split * SEGMENT, end_block = min(blocks, first_block + SEGMENT);
  uint b = head / OWN_HEADS, hh = head % OWN_HEADS;
  uint own_base = head * OWN_ROWS;
#if HAS_MASK
@MASK_BATCH@
#else
  uint mbatch = 0u;
#endif
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

  CLAMPED own_a_rows = rows_layout(own_base + OWN_ROWS, D);
  MAT_A(R, D) own_a;
  LOAD_@OWN_A@(own_a, gl_MatrixUseA, R, D, 0u,
               sliceTensorLayoutNV(own_a_rows, own_base + t0, R, 0, D));
#if HAS_OWN_B
  CLAMPED own_b_rows = rows_layout(own_base + OWN_ROWS, DV);
  MAT_A(R, DV) own_b;
  LOAD_@OWN_B@(own_b, gl_MatrixUseA, R, DV, 0u,
               sliceTensorLayoutNV(own_b_rows, own_base + t0, R, 0, DV));
#endif
#if QUERY_OWN
  for (uint r = tid; r < R; r += WG) {
    uint i = t0 + r;
    lse_sh[r] = i < OWN_ROWS ? lse_ld(own_base + i) : 0.0;
    delta_sh[r] = i < OWN_ROWS ? delta_ld(own_base + i) : 0.0;
  }
  barrier();
#endif

  ACC(R, W) acc = ACC(R, W)(0.0);
#if WITH_DV
  ACC(R, DV) acc_v = ACC(R, DV)(0.0);
#define DV_ACC acc_v
#else
#define DV_ACC acc
#endif

  for (uint n = first_block; n < end_block; ++n) {
    Block cur = block_of(n, b, hh, t0);
    uint row0 = cur.base + cur.first;
    CLAMPED a_rows = rows_layout(cur.base + cur.limit, D);
#if !QUERY_OWN
    barrier();  // every invocation is done with the last block's lse and delta
    for (uint r = tid; r < BK; r += WG) {
      uint i = cur.first + r;
      lse_sh[r] = i < cur.limit ? lse_ld(cur.base + i) : 0.0;
#if FORM == GRAD_K
      delta_sh[r] = i < cur.limit ? delta_ld(cur.base + i) : 0.0;
#endif
    }
    barrier();
#endif

    MAT_B(D, BK) other_at;
    LOAD_T_@OTHER_A@(other_at, gl_MatrixUseB, D, BK, 0u,
                     sliceTensorLayoutNV(a_rows, row0, BK, 0, D));
    CLAMPED b_rows = rows_layout(cur.base + cur.limit, DV);
    // The block's other operands: its b rows for dV, its b rows transposed for dP and its a rows
    // for the result's product.
#define LOAD_DV_B() \
  LOAD_@OTHER_B@(dv_b, gl_MatrixUseB, BK, DV, 0u, sliceTensorLayoutNV(b_rows, row0, BK, 0, DV))
#define LOAD_OTHER_BT()                             \
  LOAD_T_@OTHER_B@(other_bt, gl_MatrixUseB, DV, BK, 0u, \
                   sliceTensorLayoutNV(b_rows, row0, BK, 0, DV))
#define LOAD_OTHER_A() \
  LOAD_@OTHER_A@(other_a, gl_MatrixUseB, BK, D, 0u, sliceTensorLayoutNV(a_rows, row0, BK, 0, D))
#if WITH_DV || FORM == GRAD_V
    MAT_B(BK, DV) dv_b;
#endif
#if HAS_OWN_B
    MAT_B(DV, BK) other_bt;
    MAT_B(BK, D) other_a;
#endif
#if EARLY_LOADS
    // They load while P is computed.
#if WITH_DV || FORM == GRAD_V
    LOAD_DV_B();
#endif
#if HAS_OWN_B
    LOAD_OTHER_BT();
    LOAD_OTHER_A();
#endif
#endif
    ACC(R, BK) p = coopMatMulAdd(own_a, other_at, ACC(R, BK)(0.0));
    coopMatPerElementNV(p, p, probability, t0, cur.first, cur.limit, cur.h, mbatch);

#if WITH_DV || FORM == GRAD_V
    // dV += P · dout.
    {
      ACC(R, BK) pr;
      coopMatPerElementNV(pr, p, to_bf16);
      MAT_A(R, BK) weights = MAT_A(R, BK)(pr);
#if !EARLY_LOADS
      LOAD_DV_B();
#endif
      DV_ACC = coopMatMulAdd(weights, dv_b, DV_ACC);
    }
#endif
#if HAS_OWN_B
    // dS = P · (dP - delta), dP = own_b · other_bᵀ; result += dS · C, C the block's a rows.
#if !EARLY_LOADS
    LOAD_OTHER_BT();
#endif
    ACC(R, BK) dp = coopMatMulAdd(own_b, other_bt, ACC(R, BK)(0.0));
    coopMatPerElementNV(dp, dp, minus_delta);
    ACC(R, BK) ds = p * dp;
    coopMatPerElementNV(ds, ds, to_bf16);
    MAT_A(R, BK) weights = MAT_A(R, BK)(ds);
#if !EARLY_LOADS
    LOAD_OTHER_A();
#endif
    acc = coopMatMulAdd(weights, other_a, acc);
#endif
  }

#if SPLITS > 1
#if WITH_DV
  if (segments > 1u && !sum_segments(acc, acc_v, g, split, segments)) return;
#else
  if (segments > 1u && !sum_segments(acc, g, split, segments)) return;
#endif
#endif
#if FORM != GRAD_V
  coopMatPerElementNV(acc, acc, scale_result);
#endif
  coopMatPerElementNV(acc, acc, store_result, own_base, t0);
#if WITH_DV
  coopMatPerElementNV(acc_v, acc_v, store_dv, own_base, t0);
#endif
}
