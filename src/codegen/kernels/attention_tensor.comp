@DECLARATIONS@
// Attention over a prompt or in a training step's forward pass on workgroup-scope
// tensor-addressed matrices (GL_NV_cooperative_matrix2; filled by
// codegen/lower_attention_tensor.cpp, compiled with the current glslang): FlashAttention-2's
// forward with the softmax on the products' accumulators. scaled_dot_product_attention, or
// cached_attention at positions (HAS_POSITIONS: a prompt prefilled into caches, row i seeing the
// keys before its position + 1; keys past the tile's reach, cache slots no row of it has written,
// read as zeros; a row that sees none, a padding row, gives 0).
//
// A workgroup owns BR query rows of one head (codegen/attention_tensor_tiles.h), loaded once as
// an A-matrix, and walks the keys its rows see in blocks of BC, each loaded by tensor-addressed
// loads (rows past the head's read as zeros through clamped layouts; blocks wholly inside the
// keys load unclamped). Per block:
// - S = Q·Kᵀ on an f32 accumulator, scaled, masked and -inf where the query does not see the
//   key, per element (a block every row of which sees every key, unmasked, is only scaled);
// - the rows' running maximum M (a matrix whose every column holds its row's value) moves to
//   max(M, the block's row maximum) by a row reduction; P = exp(S - M) (0 while a row's maximum
//   is -inf: any finite score counts, however negative, as the reference's softmax), converted
//   to an A-matrix in place; L, the rows' sums, becomes L·exp(M_old - M) + the row sums of that
//   matrix, taken as its product with a matrix of ones on the matrix units rather than by a
//   second reduction (so O and L weigh the same rounded probabilities);
// - O = O·exp(M_old - M) + P·V, P converted to an A-matrix in place (exp(M_old - M) spread
//   over DV columns by a row reduction where DV is not BC).
// At the end O / L is stored per element (rows past the head's skipped), and with SAVES_LSE
// (a training step's attention_lse, schedule/saved_lse.h) each row's M + log(L) through out1.
// Split (SPLITS > 1, for grids too small to fill the device; not at positions, whose reach the
// host does not know): a tile's key blocks are walked in segments of SEGMENT blocks by up to
// SPLITS workgroups (those past the tile's blocks return at once); each stores its O, M and L into
// P, and the last to finish (counted in done[], which it sets back to zero for the next run)
// combines the segments in segment order (M the largest, O and L each scaled by exp(M_s - M),
// its own from registers: the same bits every run) and finishes the tile.
// The matrices' operands are ELEM: bf16 where an operand is bf16 or the log-sum-exp is saved
// (f32 operands rounded to nearest bf16, so that the scores are those the bf16 training kernels
// recompute), f16 otherwise.

#define HAS_MASK @HAS_MASK@
#define CAUSAL @CAUSAL@
#define SAVES_LSE @SAVES_LSE@
#define HAS_POSITIONS @HAS_POSITIONS@
// A block's every load issued at its start (DeviceTraits::tensor_attention_early_loads; unsplit
// kernels only).
#define EARLY_LOADS @EARLY_LOADS@

const uint BR = @BR@u, BC = @BC@u;
#define DV_IS_BC @DV_IS_BC@  // O and the block's matrices share their shape
const uint TILES = @TILES@u, HEADS = @HEADS@u;
#define SPLITS @SPLITS@
const uint SEGMENT = @SEGMENT@u;  // key blocks a workgroup walks where SPLITS > 1
// The mask's elements from one query row to the next and from one key to the next.
const uint MASK_ROW_STRIDE = @MASK_ROW_STRIDE@u, MASK_KEY_STRIDE = @MASK_KEY_STRIDE@u;

@OPERAND_LOADS@

// At positions, the keys row i0 + r sees: [0, reach_sh[r]) (tile_reach, codegen/attention_shape.h).
@REACH_SHARED@

// Score (r, c) of the block at query row i0 and key j0: scaled, plus the mask (its offset of
// the head's row 0, key 0 at mb); -inf where the query does not see the key.
float score(const in uint32_t r, const in uint32_t c, const in float raw, const in uint i0,
            const in uint j0, const in uint mb) {
  uint i = i0 + r, j = j0 + c;
#if HAS_POSITIONS
  if (i >= LQ || j >= reach_sh[r]) return -mn_inf();
#else
  if (i >= LQ || j >= LK || (CAUSAL != 0 && j > i)) return -mn_inf();
#endif
#if HAS_MASK
  return scaled(raw) + mask_ld(mb + i * MASK_ROW_STRIDE + j * MASK_KEY_STRIDE);
#else
  return scaled(raw);
#endif
}

// The score of a block that needs no masking.
float scaled_score(const in uint32_t r, const in uint32_t c, const in float raw) {
  return scaled(raw);
}

float larger(const in float x, const in float y) { return max(x, y); }
// A row's value (every column holds it) spread over a matrix of other width.
float either(const in float x, const in float y) { return x; }
float larger_of(const in uint32_t r, const in uint32_t c, const in float x, const in float y) {
  return max(x, y);
}
// exp(x - m) for a row's maximum m; 0 while the row has seen only -inf (no key, or masked).
float shifted_exp(const in uint32_t r, const in uint32_t c, const in float x, const in float m) {
  return m == -mn_inf() ? 0.0 : exp(x - m);
}

// Row r's output over its sum: 0 / 0, NaN, where every key it sees is masked, as the reference;
// at positions a row that sees no key gives 0.
float normalized(const in uint32_t r, const in uint32_t c, const in float o, const in float l) {
#if HAS_POSITIONS
  return l == 0.0 ? 0.0 : o / l;
#else
  return o / l;
#endif
}

float store_output(const in uint32_t r, const in uint32_t c, const in float v, const in uint bh,
                   const in uint i0) {
  if (i0 + r < LQ && c < DV) out_st((bh * LQ + i0 + r) * DV + c, v);
  return v;
}

#if SAVES_LSE
// Row r's log-sum-exp from column 0 of M and L: -inf where it saw no key or every one is masked.
float store_lse(const in uint32_t r, const in uint32_t c, const in float m, const in float l,
                const in uint bh, const in uint i0) {
  if (c == 0u && i0 + r < LQ) out1_st(bh * LQ + i0 + r, l == 0.0 ? -mn_inf() : m + log(l));
  return m;
}
#endif

#if SPLITS > 1
@SPLIT_PARTS@

// A segment's O, M and L at P: BR × DV, then BR × BC twice, row-major.
const uint SEGMENT_FLOATS = BR * (DV + 2u * BC);
UNCLAMPED partial_layout(uint width) { return inner_rows_layout(BR, width); }

// Stores this segment's o, m and l, counts it, and returns whether this workgroup is the tile's
// last: then o, m and l are every segment's combined.
bool combine_segments(inout ACC(BR, DV) o, inout ACC(BR, BC) m, inout ACC(BR, BC) l, uint wg,
                      uint split, uint segments) {
  const uint own = (split * HEADS * TILES + wg) * SEGMENT_FLOATS;
  coopMatStoreTensorNV(o, P, own, partial_layout(DV));
  coopMatStoreTensorNV(m, P, own + BR * DV, partial_layout(BC));
  coopMatStoreTensorNV(l, P, own + BR * (DV + BC), partial_layout(BC));
  if (!last_to_finish(wg, segments)) return false;
  ACC(BR, DV) o_all = ACC(BR, DV)(0.0);
  ACC(BR, BC) m_all = ACC(BR, BC)(-mn_inf());
  ACC(BR, BC) l_all = ACC(BR, BC)(0.0);
  for (uint s = 0u; s < segments; ++s) {
    ACC(BR, DV) os;
    ACC(BR, BC) ms, ls;
    if (s == split) {
      os = o;
      ms = m;
      ls = l;
    } else {
      const uint at = (s * HEADS * TILES + wg) * SEGMENT_FLOATS;
      coopMatLoadTensorNV(os, P, at, partial_layout(DV));
      coopMatLoadTensorNV(ms, P, at + BR * DV, partial_layout(BC));
      coopMatLoadTensorNV(ls, P, at + BR * (DV + BC), partial_layout(BC));
    }
    ACC(BR, BC) m_new, shrink, grow;
    coopMatPerElementNV(m_new, ms, larger_of, m_all);
    coopMatPerElementNV(shrink, m_all, shifted_exp, m_new);
    coopMatPerElementNV(grow, ms, shifted_exp, m_new);
    m_all = m_new;
    l_all = l_all * shrink + ls * grow;
#if DV_IS_BC
    o_all = o_all * shrink + os * grow;
#else
    ACC(BR, DV) shrink_rows, grow_rows;
    coopMatReduceNV(shrink_rows, shrink, gl_CooperativeMatrixReduceRowNV, either);
    coopMatReduceNV(grow_rows, grow, gl_CooperativeMatrixReduceRowNV, either);
    o_all = o_all * shrink_rows + os * grow_rows;
#endif
  }
  o = o_all;
  m = m_all;
  l = l_all;
  return true;
}
#endif

void main() {
  uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (wg >= HEADS * TILES * SPLITS) return;
  uint split = wg / (HEADS * TILES);
  wg %= HEADS * TILES;
  uint bh = wg / TILES, tile = wg % TILES;
#if CAUSAL != 0
  tile = TILES - 1u - tile;  // the query tiles that see the most keys start first
#endif
  uint h = bh % HQ, b = bh / HQ;
@HEAD_OFFSETS@
#if !HAS_MASK
  uint mb = 0u;
#endif
  uint i0 = tile * BR, tid = gl_LocalInvocationIndex;
  // The keys the tile reaches, and those every row of it sees (key_rows: what the layouts read,
  // zeros past them).
@REACH@
  uint blocks = (reach + BC - 1u) / BC;
#if SPLITS > 1
  // This workgroup's segment of the tile's key blocks; the tile's first runs even where it has
  // none.
  uint segments = max(1u, (blocks + SEGMENT - 1u) / SEGMENT);
  if (split >= segments) return;
  uint first_block = split * SEGMENT, end_block = min(blocks, first_block + SEGMENT);
#else
  uint first_block = 0u, end_block = blocks;
#endif
#if HAS_POSITIONS
  uint seen_by_all = LK;
  for (uint r = 0u; r < BR; ++r) seen_by_all = min(seen_by_all, reach_sh[r]);
  uint key_rows = reach;
#else
  uint seen_by_all = HAS_MASK != 0 || i0 + BR > LQ ? 0u : CAUSAL != 0 ? min(LK, i0 + 1u) : LK;
  uint key_rows = LK;
#endif
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

  CLAMPED q_rows = rows_layout(LQ, D), k_rows = rows_layout(key_rows, D),
          v_rows = rows_layout(key_rows, DV);
  UNCLAMPED k_inner = inner_rows_layout(key_rows, D), v_inner = inner_rows_layout(key_rows, DV);
  MAT_A(BR, D) q;
  LOAD_q(q, gl_MatrixUseA, BR, D, qb, sliceTensorLayoutNV(q_rows, i0, BR, 0, D));

  ACC(BR, DV) o = ACC(BR, DV)(0.0);
  ACC(BR, BC) m = ACC(BR, BC)(-mn_inf());
  ACC(BR, BC) l = ACC(BR, BC)(0.0);
  MAT_B(BC, BC) ones = MAT_B(BC, BC)(ELEM(1.0));  // the rows' sums of P as a product
  for (uint n = first_block; n < end_block; ++n) {
    uint j0 = n * BC;
    bool keys_inside = j0 + BC <= key_rows;
    // Every row of the block sees every key of it, unmasked.
    bool unmasked = j0 + BC <= seen_by_all;
    MAT_B(D, BC) kt;
    if (keys_inside) {
      LOAD_T_k(kt, gl_MatrixUseB, D, BC, kb, sliceTensorLayoutNV(k_inner, j0, BC, 0, D));
    } else {
      LOAD_T_k(kt, gl_MatrixUseB, D, BC, kb, sliceTensorLayoutNV(k_rows, j0, BC, 0, D));
    }
    // The values' block, unclamped where it lies inside the keys.
#define LOAD_VALUES(vm)                                                                   \
  if (keys_inside) {                                                                      \
    LOAD_v(vm, gl_MatrixUseB, BC, DV, vb, sliceTensorLayoutNV(v_inner, j0, BC, 0, DV));   \
  } else {                                                                                \
    LOAD_v(vm, gl_MatrixUseB, BC, DV, vb, sliceTensorLayoutNV(v_rows, j0, BC, 0, DV));    \
  }
    MAT_B(BC, DV) vm;
#if EARLY_LOADS
    LOAD_VALUES(vm);  // while the scores and their softmax are computed
#endif
    ACC(BR, BC) s = coopMatMulAdd(q, kt, ACC(BR, BC)(0.0));
    if (unmasked) {
      coopMatPerElementNV(s, s, scaled_score);
    } else {
      coopMatPerElementNV(s, s, score, i0, j0, mb);
    }

    ACC(BR, BC) block_max, m_new, p, shrink;
    coopMatReduceNV(block_max, s, gl_CooperativeMatrixReduceRowNV, larger);
    coopMatPerElementNV(m_new, block_max, larger_of, m);
    coopMatPerElementNV(p, s, shifted_exp, m_new);
    coopMatPerElementNV(shrink, m, shifted_exp, m_new);
    m = m_new;

#if DV_IS_BC
    o = o * shrink;
#else
    ACC(BR, DV) shrink_rows;
    coopMatReduceNV(shrink_rows, shrink, gl_CooperativeMatrixReduceRowNV, either);
    o = o * shrink_rows;
#endif
@ROUND_P@
    MAT_A(BR, BC) pa = MAT_A(BR, BC)(p);
    l = coopMatMulAdd(pa, ones, shrink * l);
#if !EARLY_LOADS
    LOAD_VALUES(vm);
#endif
    o = coopMatMulAdd(pa, vm, o);
  }

#if SPLITS > 1
  if (segments > 1u && !combine_segments(o, m, l, wg, split, segments)) return;
#endif
#if DV_IS_BC
  coopMatPerElementNV(o, o, normalized, l);
#else
  ACC(BR, DV) l_rows;
  coopMatReduceNV(l_rows, l, gl_CooperativeMatrixReduceRowNV, either);
  coopMatPerElementNV(o, o, normalized, l_rows);
#endif
  coopMatPerElementNV(o, o, store_output, bh, i0);
#if SAVES_LSE
  coopMatPerElementNV(m, m, store_lse, l, bh, i0);
#endif
}
