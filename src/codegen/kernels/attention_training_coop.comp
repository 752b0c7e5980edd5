@DECLARATIONS@
// Attention's training ops on tensor cores (filled by codegen/lower_attention_training_coop.cpp):
// the forms of attention_training_tiled.comp with every product on 16×16×16 bf16 cooperative
// matrices accumulating in f32 (KHR matrices; the current glslang compiles GL_EXT_bfloat16).
//
// A workgroup of four subgroups owns R = 64 rows of one head, 16 per subgroup: query rows for
// attention_lse and attention_grad_q, key rows of a key/value head for attention_grad_k and
// attention_grad_v. Its own rows (a: q or k; b: dout or v) are rounded to bf16 once and stay in
// registers as A-matrices. It streams the other side in blocks of BK rows (the keys its queries
// see; the query rows of every query head of the group that see its keys, so the GQA sum
// happens here and no k or v is repeated), rounded to bf16 and staged in shared memory (rows
// padded by one 16-byte unit), the block after it loaded into registers meanwhile. Per block,
// each subgroup:
// - S = own_a · other_aᵀ into f32 matrices, stored column-major to its part of `sc`;
// - two lanes per row, one taking the even columns and one the odd, scale and mask the scores
//   and keep P = exp(S - lse) in registers (attention_lse: the running maximum and sum);
// - dP = own_b · other_bᵀ the same way (attention_grad_q and _k), and the weights
//   dS = P·(dP - delta) (or P for attention_grad_v) written as bf16 to `wt`: bf16 keeps f32's
//   range, so small gradients do not flush to zero as they would in f16;
// - result += weights · C on f32 accumulators, C the block's rows of k (dq), q (dk) or dout (dv).
// At the end each result matrix goes out through `sc`, each lane storing its row's columns.
// With WITH_DV, attention_grad_k also accumulates attention_grad_v's result from the same P:
// P goes to `wt` as bf16 first, dV += P · dout on a second set of accumulators, then dS takes
// its place for dK; dV is stored through out1, and no kernel recomputes the scores for it alone.

#define LSE 0
#define GRAD_Q 1
#define GRAD_K 2
#define GRAD_V 3
#define FORM @FORM@
#define QUERY_OWN (FORM == LSE || FORM == GRAD_Q)
#define HAS_OWN_B (FORM == GRAD_Q || FORM == GRAD_K)  // dP = own_b · other_bᵀ
#define HAS_OTHER_B (FORM != LSE)
#define CAUSAL @CAUSAL@
#define HAS_MASK @HAS_MASK@
#define WITH_DV @WITH_DV@  // attention_grad_k storing attention_grad_v as output 1

const uint R = 64u, BK = @BK@u, LANES = 128u;
const uint AU = D / 8u, BU = DV / 8u;   // 16-byte units (8 bf16) of a row of a (width D), b (DV)
const uint AS = AU + 1u, BS = BU + 1u;  // their staged row strides in units
const uint BOFF = BK * AS;              // the block's b rows after its a rows
const uint W = @W@u;                    // output columns
const uint OWN_ROWS = @OWN_ROWS@u, OWN_HEADS = @OWN_HEADS@u, TILES = @TILES@u;
const uint GROUPS = @GROUPS@u;
const uint NA = (BK * AU + LANES - 1u) / LANES, NB = (BK * BU + LANES - 1u) / LANES;
// The rows the result accumulates: k for dq, q for dk (the block's a rows), dout for dv (b's).
const uint C_OFF = @C_OFF@, C_S = @C_S@;

shared uvec4 kv[@KV_UNITS@];       // the own rows at first, then each block's a and b rows
shared float sc[4u * 16u * BK];     // each subgroup's scores, its dP, its results on the way out
#if FORM != LSE
shared uint16_t wt[4u * 16u * BK];  // each subgroup's weights as bf16, column-major
#endif

#if !QUERY_OWN
shared float lse_sh[BK];  // the block's query rows' log-sum-exp (and delta)
#if FORM == GRAD_K
shared float delta_sh[BK];
#endif
#endif
#if FORM == LSE
shared vec2 pair_sh[4u * 32u];  // a row's two lanes exchanging their maxima and sums
#endif

#define A16 coopmat<bfloat16_t, gl_ScopeSubgroup, 16u, 16u, gl_MatrixUseA>
#define B16 coopmat<bfloat16_t, gl_ScopeSubgroup, 16u, 16u, gl_MatrixUseB>
#define F32 coopmat<float, gl_ScopeSubgroup, 16u, 16u, gl_MatrixUseAccumulator>
#define ROWS gl_CooperativeMatrixLayoutRowMajor
#define COLUMNS gl_CooperativeMatrixLayoutColumnMajor

@BLOCKS@

// Block `k`'s rows of operand a (and b) into the registers ra (rb), zeros past its rows.
#if HAS_OTHER_B
#define OTHER_B_PARAM , inout uvec4 rb[NB]
#define OTHER_B_ARG , rb
#else
#define OTHER_B_PARAM
#define OTHER_B_ARG
#endif
void load_block(Block k, uint tid, inout uvec4 ra[NA] OTHER_B_PARAM) {
  [[unroll]] for (uint u = 0u; u < NA; ++u) {
    uint x = tid + u * LANES, row = k.first + x / AU;
    ra[u] = x < BK * AU && row < k.limit ? @OTHER_A@((k.base + row) * D + (x % AU) * 8u)
                                         : uvec4(0u);
  }
#if HAS_OTHER_B
  [[unroll]] for (uint u = 0u; u < NB; ++u) {
    uint x = tid + u * LANES, row = k.first + x / BU;
    rb[u] = x < BK * BU && row < k.limit ? @OTHER_B@((k.base + row) * DV + (x % BU) * 8u)
                                         : uvec4(0u);
  }
#endif
}

#if HAS_MASK
@MASK_FUNCTION@
#endif

void main() {
  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (g >= GROUPS) return;
  uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint head = g / TILES, tile = g % TILES;
#if CAUSAL != 0 && QUERY_OWN
  tile = TILES - 1u - tile;  // the query tiles that see the most keys start first
#endif
  uint t0 = tile * R;
  uint b = head / OWN_HEADS, hh = head % OWN_HEADS;
  uint own_base = head * OWN_ROWS;
#if HAS_MASK
@MASK_BATCH@
#endif

  // The own rows as A-matrices (zeros past the head's rows), staged through kv one operand at
  // a time.
  for (uint x = tid; x < R * AU; x += LANES) {
    uint r = x / AU, row = t0 + r;
    kv[r * AS + x % AU] =
        row < OWN_ROWS ? @OWN_A@((own_base + row) * D + (x % AU) * 8u) : uvec4(0u);
  }
  barrier();
  A16 own_a[D / 16u];
  [[unroll]] for (uint e = 0u; e < D / 16u; ++e) {
    coopMatLoad(own_a[e], kv, sg * 16u * AS + 2u * e, AS, ROWS);
  }
#if HAS_OWN_B
  barrier();
  for (uint x = tid; x < R * BU; x += LANES) {
    uint r = x / BU, row = t0 + r;
    kv[r * BS + x % BU] =
        row < OWN_ROWS ? @OWN_B@((own_base + row) * DV + (x % BU) * 8u) : uvec4(0u);
  }
  barrier();
  A16 own_b[DV / 16u];
  [[unroll]] for (uint e = 0u; e < DV / 16u; ++e) {
    coopMatLoad(own_b[e], kv, sg * 16u * BS + 2u * e, BS, ROWS);
  }
#endif

  // This lane's row of the subgroup's 16, the parity of its columns, its part of sc (and wt).
  uint r = lane >> 1u, par = lane & 1u, scr = sg * 16u * BK;
  uint own = t0 + sg * 16u + r;
#if FORM == GRAD_Q
  float lse_o = own < OWN_ROWS ? lse_ld(own_base + own) : 0.0;
  float delta_o = own < OWN_ROWS ? delta_ld(own_base + own) : 0.0;
#endif
#if FORM == LSE
  float m = -mn_inf(), l = 0.0;
#else
  F32 acc[W / 16u];
  [[unroll]] for (uint f = 0u; f < W / 16u; ++f) acc[f] = F32(0.0);
#endif
#if WITH_DV
  F32 acc_v[DV / 16u];
  [[unroll]] for (uint f = 0u; f < DV / 16u; ++f) acc_v[f] = F32(0.0);
#endif

  uvec4 ra[NA];
#if HAS_OTHER_B
  uvec4 rb[NB];
#endif
  uint blocks = block_count(t0);
  Block next = block_of(0u, b, hh, t0);
  if (blocks > 0u) load_block(next, tid, ra OTHER_B_ARG);

  for (uint n = 0u; n < blocks; ++n) {
    Block cur = next;
    barrier();  // every subgroup is done with the last block (and the own rows)
    [[unroll]] for (uint u = 0u; u < NA; ++u) {
      uint x = tid + u * LANES;
      if (x < BK * AU) kv[(x / AU) * AS + x % AU] = ra[u];
    }
#if HAS_OTHER_B
    [[unroll]] for (uint u = 0u; u < NB; ++u) {
      uint x = tid + u * LANES;
      if (x < BK * BU) kv[BOFF + (x / BU) * BS + x % BU] = rb[u];
    }
#endif
#if !QUERY_OWN
    if (tid < BK) {
      uint i = cur.first + tid;
      lse_sh[tid] = i < cur.limit ? lse_ld(cur.base + i) : 0.0;
#if FORM == GRAD_K
      delta_sh[tid] = i < cur.limit ? delta_ld(cur.base + i) : 0.0;
#endif
    }
#endif
    barrier();
    if (n + 1u < blocks) {
      next = block_of(n + 1u, b, hh, t0);
      load_block(next, tid, ra OTHER_B_ARG);
    }

    // S = own_a · other_aᵀ, column-major into the subgroup's part of sc.
    [[unroll]] for (uint c = 0u; c < BK / 16u; ++c) {
      F32 s = F32(0.0);
      [[unroll]] for (uint e = 0u; e < D / 16u; ++e) {
        B16 kf;
        coopMatLoad(kf, kv, c * 16u * AS + 2u * e, AS, COLUMNS);
        s = coopMatMulAdd(own_a[e], kf, s);
      }
      coopMatStore(s, sc, scr + c * 256u, 16u, COLUMNS);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();

    // The lane's scores scaled and masked, -inf where the query does not see the key; P.
    float p[BK / 2u];
#if FORM == LSE
    float bm = -mn_inf();
#endif
    [[unroll]] for (uint c = 0u; c < BK / 2u; ++c) {
      uint col = 2u * c + par, other = cur.first + col;
#if QUERY_OWN
      uint i = own, j = other;
#else
      uint i = other, j = own;
#endif
      bool seen = own < OWN_ROWS && other < cur.limit && (CAUSAL == 0 || j <= i);
      float raw = sc[scr + col * 16u + r];
#if HAS_MASK
      float s = seen ? scaled(raw) + mask_ld(mask_at(mbatch, cur.h, i, j)) : -mn_inf();
#else
      float s = seen ? scaled(raw) : -mn_inf();
#endif
#if FORM == LSE
      p[c] = s;
      bm = max(bm, s);
#elif QUERY_OWN
      p[c] = s == -mn_inf() ? 0.0 : exp(s - lse_o);
#else
      p[c] = s == -mn_inf() ? 0.0 : exp(s - lse_sh[col]);
#endif
    }

#if FORM == LSE
    // The lane's running maximum and sum of its half of the row.
    float mx = max(m, bm);
    if (mx != -mn_inf()) {
      float sum = 0.0;
      [[unroll]] for (uint c = 0u; c < BK / 2u; ++c) {
        sum += p[c] == -mn_inf() ? 0.0 : exp(p[c] - mx);
      }
      l = (m == -mn_inf() ? 0.0 : l * exp(m - mx)) + sum;
      m = mx;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // every lane has read its scores before the next block's
#else
#if WITH_DV
    // dV += P · dout: P's A-matrices through wt, the block's dout rows (b) from kv.
    [[unroll]] for (uint c = 0u; c < BK / 2u; ++c) {
      wt[scr + (2u * c + par) * 16u + r] = uint16_t(mn_f32_to_bf16(p[c]));
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    [[unroll]] for (uint t = 0u; t < BK / 16u; ++t) {
      A16 pf;
      coopMatLoad(pf, wt, scr + t * 256u, 16u, COLUMNS);
      [[unroll]] for (uint f = 0u; f < DV / 16u; ++f) {
        B16 cf;
        coopMatLoad(cf, kv, BOFF + t * 16u * BS + 2u * f, BS, ROWS);
        acc_v[f] = coopMatMulAdd(pf, cf, acc_v[f]);
      }
    }
#endif
#if HAS_OWN_B
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // every lane has read its scores (and P in wt): dP goes where they were
    [[unroll]] for (uint c = 0u; c < BK / 16u; ++c) {
      F32 s = F32(0.0);
      [[unroll]] for (uint e = 0u; e < DV / 16u; ++e) {
        B16 vf;
        coopMatLoad(vf, kv, BOFF + c * 16u * BS + 2u * e, BS, COLUMNS);
        s = coopMatMulAdd(own_b[e], vf, s);
      }
      coopMatStore(s, sc, scr + c * 256u, 16u, COLUMNS);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
#endif
    [[unroll]] for (uint c = 0u; c < BK / 2u; ++c) {
      uint col = 2u * c + par, at = scr + col * 16u + r;
#if FORM == GRAD_Q
      float w = p[c] * (sc[at] - delta_o);
#elif FORM == GRAD_K
      float w = p[c] * (sc[at] - delta_sh[col]);
#else
      float w = p[c];
#endif
      wt[at] = uint16_t(mn_f32_to_bf16(w));
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();

    // result += weights · C: the weights' A-matrices from wt, C's B-matrices from kv.
    [[unroll]] for (uint t = 0u; t < BK / 16u; ++t) {
      A16 wf;
      coopMatLoad(wf, wt, scr + t * 256u, 16u, COLUMNS);
      [[unroll]] for (uint f = 0u; f < W / 16u; ++f) {
        B16 cf;
        coopMatLoad(cf, kv, C_OFF + t * 16u * C_S + 2u * f, C_S, ROWS);
        acc[f] = coopMatMulAdd(wf, cf, acc[f]);
      }
    }
#endif
  }

#if FORM == LSE
  // The row's two lanes combined; no visible key (or all masked): -inf, as the reference.
  pair_sh[sg * 32u + lane] = vec2(m, l);
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  vec2 o = pair_sh[sg * 32u + (lane ^ 1u)];
  float mx = max(m, o.x);
  float sum = 0.0;
  if (mx != -mn_inf()) {
    sum = (m == -mn_inf() ? 0.0 : l * exp(m - mx)) + (o.x == -mn_inf() ? 0.0 : o.y * exp(o.x - mx));
  }
  if (par == 0u && own < OWN_ROWS) {
    out_st(own_base + own, mx == -mn_inf() ? -mn_inf() : mx + log(sum));
  }
#else
  // Each result matrix through the subgroup's part of sc, the lane storing its row's columns.
  [[unroll]] for (uint f = 0u; f < W / 16u; ++f) {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    coopMatStore(acc[f], sc, scr, 16u, COLUMNS);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (own < OWN_ROWS) {
      [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        uint col = 2u * c + par;
        float v = sc[scr + col * 16u + r];
#if FORM == GRAD_V
        out_st((own_base + own) * W + f * 16u + col, v);
#else
        out_st((own_base + own) * W + f * 16u + col, scaled(v));
#endif
      }
    }
  }
#endif
#if WITH_DV
  [[unroll]] for (uint f = 0u; f < DV / 16u; ++f) {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    coopMatStore(acc_v[f], sc, scr, 16u, COLUMNS);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (own < OWN_ROWS) {
      [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        uint col = 2u * c + par;
        out1_st((own_base + own) * DV + f * 16u + col, sc[scr + col * 16u + r]);
      }
    }
  }
#endif
}
