@DECLARATIONS@
// Attention over a prompt on tensor cores (filled by codegen/lower_attention_coop.cpp): flash
// attention with 16×16×16 f16 cooperative matrices and f32 accumulation.
//
// A workgroup of four subgroups owns BR = 64 query rows of one head, 16 per subgroup, and walks
// the keys its rows see in blocks of BC. The query rows are rounded to f16 once and stay in
// registers as D/16 A-matrices; each block of keys and values is rounded to f16 and staged in
// shared memory (rows padded by one 16-byte unit, so a matrix load touches distinct banks), the
// block after it loaded into registers meanwhile. Per block, each subgroup:
// - scores S = Q·Kᵀ into f32 matrices, stored column-major to its part of `sc`;
// - two lanes per row, one taking the even keys and one the odd, scale, mask and hide the keys
//   past the row's reach, take the row's block maximum and write the probabilities
//   exp(s - ref) as f16 to `pr`, each lane keeping its half of the row's sum;
// - O += P·V on f32 accumulator matrices.
// The reference `ref` of a row is a running maximum that moves only when a block's maximum
// exceeds it by more than TAU, so probabilities stay below e^TAU (f16 holds them with its full
// precision) and O is rarely rescaled. When a row's reference moves, the subgroup rescales its
// output matrices by exp(old - new) row by row through `sc`: an accumulator's elements belong
// to rows the implementation chooses, so the rows are scaled where the lanes know them.
// Column-major with 16 rows a column, lane (row r, parity h) reading column 2c + h meets bank
// r + 16h: the 32 lanes read 32 distinct banks. At the end O goes out through `sc` the same way,
// each lane dividing its row's columns by the row's sum.
// SAVES_LSE (a training step's attention_lse, schedule/saved_lse.h): each row's log-sum-exp,
// ref + log(sum), is stored through out1, and the operands are rounded to bf16 before f16 (exact
// within f16's range) so that the scores are those the bf16 training kernels recompute.

#define HAS_MASK @HAS_MASK@
#define CAUSAL_ORDER @CAUSAL_ORDER@
#define SAVES_LSE @SAVES_LSE@

const uint BR = 64u, BC = @BC@u, LANES = 128u;
const uint DU = D / 8u, DVU = DV / 8u;       // 16-byte units (8 halves) of a row of k and v
const uint KS = DU + 1u, VS = DVU + 1u;      // staged row strides in units
const uint VOFF = BC * KS;                   // the staged values after the keys
const uint TILES = @TILES@u, HEADS = @HEADS@u;
const uint NK = BC * DU / LANES, NV = BC * DVU / LANES;  // units a lane loads per block
const uint MASK_ROW_STRIDE = @MASK_ROW_STRIDE@u;  // the mask's elements from one row to the next
const float TAU = 8.0;  // how far a block's maximum may exceed a row's reference unrescaled

shared uvec4 kv[@KV_UNITS@];        // the query tile at first, then each block's keys and values
shared float sc[4u * 16u * BC];      // each subgroup's scores; its outputs when rescaled and stored
shared float16_t pr[4u * 16u * BC];  // each subgroup's probabilities, column-major
shared float pair_sh[4u * 32u];      // a row's two lanes exchanging their maxima and sums
@REACH_SHARED@

#define F16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

#if SAVES_LSE
float to_bf16(float x) { return mn_bf16_to_f32(mn_f32_to_bf16(x)); }
vec4 to_bf16(vec4 v) { return vec4(to_bf16(v.x), to_bf16(v.y), to_bf16(v.z), to_bf16(v.w)); }
#else
vec4 to_bf16(vec4 v) { return v; }
#endif
uvec4 pack8(vec4 a, vec4 b) {
  a = to_bf16(a);
  b = to_bf16(b);
  return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}
// Elements at .. at + 7 (at a multiple of 8) of q, k or v as f16.
uvec4 q8(uint at) { return pack8(q4_ld(at >> 2), q4_ld((at >> 2) + 1u)); }
uvec4 k8(uint at) { return pack8(k4_ld(at >> 2), k4_ld((at >> 2) + 1u)); }
uvec4 v8(uint at) { return pack8(v4_ld(at >> 2), v4_ld((at >> 2) + 1u)); }

void main() {
  uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (wg >= HEADS * TILES) return;
  uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint bh = wg / TILES, tile = wg % TILES;
#if CAUSAL_ORDER
  tile = TILES - 1u - tile;  // the tiles that see the most keys start first
#endif
  uint i0 = tile * BR;
  uint h = bh % HQ, b = bh / HQ;
@HEAD_OFFSETS@
  // The query tile as f16, zeros past LQ.
  for (uint x = tid; x < BR * DU; x += LANES) {
    uint r = x / DU, u = x % DU;
    kv[r * KS + u] = i0 + r < LQ ? q8(qb + (i0 + r) * D + u * 8u) : uvec4(0u);
  }
@REACH@
  barrier();
@LOAD_QUERY@

  // This lane's row of the subgroup's 16, the parity of its keys and columns, and the
  // subgroup's part of sc and pr.
  uint r = lane >> 1u, par = lane & 1u, row = sg * 16u + r, scr = sg * 16u * BC;
  uint i = i0 + row;
  uint vis = i < LQ ? @VISIBLE@ : 0u;
#if HAS_MASK
  uint mbr = mb + min(i, LQ - 1u) * MASK_ROW_STRIDE;
#endif
  float ref = -mn_inf(), l = 0.0;
@OUTPUT_MATRICES@
  uvec4 kr[NK], vr[NV];
  // The block of keys from `first` into registers, zeros past the tile's reach: a key no row
  // sees weighs 0, and 0 times a NaN left in an unwritten cache slot would still be NaN.
#define LOAD_BLOCK(first)                                                  \
  [[unroll]] for (uint n = 0u; n < NK; ++n) {                              \
    uint x = tid + n * LANES, key = (first) + x / DU;                      \
    kr[n] = key < reach ? k8(kb + key * D + (x % DU) * 8u) : uvec4(0u);    \
  }                                                                        \
  [[unroll]] for (uint n = 0u; n < NV; ++n) {                              \
    uint x = tid + n * LANES, key = (first) + x / DVU;                     \
    vr[n] = key < reach ? v8(vb + key * DV + (x % DVU) * 8u) : uvec4(0u);  \
  }
  if (reach > 0u) { LOAD_BLOCK(0u) }
  for (uint j0 = 0u; j0 < reach; j0 += BC) {
    barrier();  // every subgroup is done with the last block (and the query tile)
    [[unroll]] for (uint n = 0u; n < NK; ++n) {
      uint x = tid + n * LANES;
      kv[(x / DU) * KS + x % DU] = kr[n];
    }
    [[unroll]] for (uint n = 0u; n < NV; ++n) {
      uint x = tid + n * LANES;
      kv[VOFF + (x / DVU) * VS + x % DVU] = vr[n];
    }
    barrier();
    if (j0 + BC < reach) { LOAD_BLOCK(j0 + BC) }

@SCORES@
    subgroupMemoryBarrierShared();
    subgroupBarrier();

    // The row's scores: scaled, masked, hidden past its reach; the block maximum of both lanes.
    float bm = -mn_inf();
    for (uint c = 0u; c < BC / 2u; ++c) {
      uint key = 2u * c + par, jj = j0 + key;
      float dot = sc[scr + key * 16u + r];
      float v = jj < vis ? @SCORE@ : -mn_inf();
      sc[scr + key * 16u + r] = v;
      bm = v > bm ? v : bm;
    }
    pair_sh[sg * 32u + lane] = bm;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    float other = pair_sh[sg * 32u + (lane ^ 1u)];
    bm = other > bm ? other : bm;
    // A new reference where the block's maximum passes the old one by more than TAU (from -inf,
    // any finite maximum does: the row's outputs and sum are still 0, nothing to rescale).
    float alpha = 1.0;
    if (bm > ref + TAU) {
      if (ref != -mn_inf()) alpha = exp(ref - bm);
      ref = bm;
    }
    l *= alpha;
    // Masked keys (-inf) weigh 0; a row whose keys are all masked ends as 0 / 0 = NaN, as the
    // reference's exp(-inf - -inf).
    for (uint c = 0u; c < BC / 2u; ++c) {
      uint at = scr + (2u * c + par) * 16u + r;
      float v = sc[at];
      float p = v == -mn_inf() ? 0.0 : exp(v - ref);
      l += p;
      pr[at] = float16_t(p);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (subgroupAny(alpha != 1.0)) {
@RESCALE@
    }

@ACCUMULATE@
  }

  // The row sums of both lanes; rows that see no key are 0 (the reference's empty sum).
  pair_sh[sg * 32u + lane] = l;
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  float sum = l + pair_sh[sg * 32u + (lane ^ 1u)];
  float inv = vis == 0u ? 0.0 : 1.0 / sum;
#if SAVES_LSE
  if (par == 0u && i < LQ) {
@LSE_STORE@
  }
#endif
  uint ob = (bh * LQ + i) * DV + par;
@STORE@
}
