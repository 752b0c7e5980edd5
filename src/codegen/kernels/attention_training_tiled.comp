@DECLARATIONS@
// Attention's training ops on register tiles (filled by codegen/lower_attention_training.cpp).
//
// A workgroup owns a tile of R rows of one head: query rows for attention_lse and
// attention_grad_q, key rows of a key/value head for attention_grad_k and attention_grad_v.
// It streams the other side in blocks of BK rows (the keys the tile's queries see; the query
// rows of every query head of the group that see the tile's keys, so the GQA sum happens here
// and no k or v is repeated). Lanes are (R / 4) row groups × 16: each holds the scores of 4 own
// rows × CPL other rows (rows tx + 16·c) and, per 64 output columns, 4 rows × 4 columns of the
// result. Tiles sit in shared memory row-major in vec4s along the head dimension, XOR-swizzled
// (or padded) so that the 16 lanes reading 16 other rows hit distinct banks. The block after
// the current one is loaded into registers while the current one's products run.
//
// Per block: S = own·otherᵀ (scaled, masked, causal), and
// - attention_lse: each lane's running maximum and sum per row, combined over the row's 16
//   lanes at the end: lse = max + log(sum);
// - the gradients: P = exp(S - lse) recomputed, dP = own_b·other_bᵀ where needed, the weights
//   (dS = P·(dP - delta) for dq and dk, P for dv) transposed into shared memory, and the
//   result += weightsᵀ-product with the block's C rows (k for dq, q for dk, dout for dv).

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

const uint R = @R@u, BK = @BK@u, LANES = R / 4u * 16u;
const uint CPL = BK / 16u;         // other rows per lane
const uint A4 = D / 4u, B4 = DV / 4u;  // vec4s of a row of operand a (width D) and b (DV)
const uint PA = @PA@u, PB = @PB@u;     // their row strides in shared memory (vec4s)
const uint R4 = R / 4u + 1u;           // the weights' row stride: one vec4 of padding
const uint W = @W@u, QW = W / 64u;     // output columns, and vec4 groups of them per lane
const uint OWN_ROWS = @OWN_ROWS@u, OWN_HEADS = @OWN_HEADS@u, TILES = @TILES@u;
const uint GROUPS = @GROUPS@u;
const uint NA = (BK * A4 + LANES - 1u) / LANES, NB = (BK * B4 + LANES - 1u) / LANES;

// Row `row`, vec4 `e4` of a staged tile: XOR-swizzled when a row is a multiple of 8 vec4s,
// else rows padded to an odd stride.
uint at_a(uint row, uint e4) { return row * PA + (A4 % 8u == 0u ? e4 ^ (row & 7u) : e4); }
uint at_b(uint row, uint e4) { return row * PB + (B4 % 8u == 0u ? e4 ^ (row & 7u) : e4); }

shared vec4 own_a[R * PA];
shared vec4 other_a[BK * PA];
#if HAS_OWN_B
shared vec4 own_b[R * PB];
#endif
#if HAS_OTHER_B
shared vec4 other_b[BK * PB];
#endif
#if FORM == LSE
shared vec2 red[R * 16u];
#endif
// The weights [other row][own row vec4], in the block that is done with when they are written.
#define WEIGHTS @WEIGHTS@
@WEIGHTS_DECLARATION@
// The rows the result accumulates: k for dq, q for dk (operand a's block), dout for dv (b's).
#define C_ROWS @C_ROWS@
#define AT_C @AT_C@

@BLOCKS@

// Block `k`'s rows of operand a (and b) into the registers ra (rb), zeros past its rows.
#if HAS_OTHER_B
#define OTHER_B_PARAM , inout vec4 rb[NB]
#define OTHER_B_ARG , rb
#else
#define OTHER_B_PARAM
#define OTHER_B_ARG
#endif
void load_block(Block k, uint tid, inout vec4 ra[NA] OTHER_B_PARAM) {
  [[unroll]] for (uint u = 0u; u < NA; ++u) {
    uint x = tid + u * LANES, row = k.first + x / A4, at = (k.base + row) * D + (x % A4) * 4u;
    ra[u] = x < BK * A4 && row < k.limit
        ? vec4(@OTHER_A@(at), @OTHER_A@(at + 1u), @OTHER_A@(at + 2u), @OTHER_A@(at + 3u))
        : vec4(0.0);
  }
#if HAS_OTHER_B
  [[unroll]] for (uint u = 0u; u < NB; ++u) {
    uint x = tid + u * LANES, row = k.first + x / B4, at = (k.base + row) * DV + (x % B4) * 4u;
    rb[u] = x < BK * B4 && row < k.limit
        ? vec4(@OTHER_B@(at), @OTHER_B@(at + 1u), @OTHER_B@(at + 2u), @OTHER_B@(at + 3u))
        : vec4(0.0);
  }
#endif
}

#if HAS_MASK
@MASK_FUNCTION@
#endif

void main() {
  uint g = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (g >= GROUPS) return;
  uint tid = gl_LocalInvocationID.x, tx = tid % 16u, ty = tid / 16u;
  uint head = g / TILES, t0 = (g % TILES) * R;
  uint b = head / OWN_HEADS, hh = head % OWN_HEADS;
  uint own_base = head * OWN_ROWS;
#if HAS_MASK
@MASK_BATCH@
#endif

  // The own tile(s), zeros past the head's rows.
  for (uint x = tid; x < R * A4; x += LANES) {
    uint r = x / A4, e4 = x % A4, row = t0 + r, at = (own_base + row) * D + e4 * 4u;
    own_a[at_a(r, e4)] = row < OWN_ROWS
        ? vec4(@OWN_A@(at), @OWN_A@(at + 1u), @OWN_A@(at + 2u), @OWN_A@(at + 3u)) : vec4(0.0);
  }
#if HAS_OWN_B
  for (uint x = tid; x < R * B4; x += LANES) {
    uint r = x / B4, e4 = x % B4, row = t0 + r, at = (own_base + row) * DV + e4 * 4u;
    own_b[at_b(r, e4)] = row < OWN_ROWS
        ? vec4(@OWN_B@(at), @OWN_B@(at + 1u), @OWN_B@(at + 2u), @OWN_B@(at + 3u)) : vec4(0.0);
  }
#endif
#if FORM == GRAD_Q
  float lse_r[4], delta_r[4];
  [[unroll]] for (uint r = 0u; r < 4u; ++r) {
    uint i = t0 + ty * 4u + r;
    lse_r[r] = i < OWN_ROWS ? lse_ld(own_base + i) : 0.0;
    delta_r[r] = i < OWN_ROWS ? delta_ld(own_base + i) : 0.0;
  }
#endif
#if FORM == LSE
  float m[4], l[4];
  [[unroll]] for (uint r = 0u; r < 4u; ++r) { m[r] = -mn_inf(); l[r] = 0.0; }
#else
  vec4 acc[4][QW];
  [[unroll]] for (uint r = 0u; r < 4u; ++r)
    [[unroll]] for (uint q = 0u; q < QW; ++q) acc[r][q] = vec4(0.0);
#endif

  // The next block's rows in registers.
  vec4 ra[NA];
#if HAS_OTHER_B
  vec4 rb[NB];
#endif
  uint blocks = block_count(t0);
  Block next = block_of(0u, b, hh, t0);
  if (blocks > 0u) load_block(next, tid, ra OTHER_B_ARG);

  for (uint n = 0u; n < blocks; ++n) {
    Block cur = next;
    barrier();  // the previous block's readers are done (and the own tiles are written)
    [[unroll]] for (uint u = 0u; u < NA; ++u) {
      uint x = tid + u * LANES;
      if (x < BK * A4) other_a[at_a(x / A4, x % A4)] = ra[u];
    }
#if HAS_OTHER_B
    [[unroll]] for (uint u = 0u; u < NB; ++u) {
      uint x = tid + u * LANES;
      if (x < BK * B4) other_b[at_b(x / B4, x % B4)] = rb[u];
    }
#endif
    barrier();
    if (n + 1u < blocks) {
      next = block_of(n + 1u, b, hh, t0);
      load_block(next, tid, ra OTHER_B_ARG);
    }

    // S = own_a · other_aᵀ (and dP = own_b · other_bᵀ) for the lane's 4 × CPL.
    float s[4][CPL];
    [[unroll]] for (uint r = 0u; r < 4u; ++r)
      [[unroll]] for (uint c = 0u; c < CPL; ++c) s[r][c] = 0.0;
    for (uint e4 = 0u; e4 < A4; ++e4) {
      vec4 o[4];
      [[unroll]] for (uint r = 0u; r < 4u; ++r) o[r] = own_a[at_a(ty * 4u + r, e4)];
      [[unroll]] for (uint c = 0u; c < CPL; ++c) {
        vec4 k = other_a[at_a(tx + 16u * c, e4)];
        [[unroll]] for (uint r = 0u; r < 4u; ++r) s[r][c] += dot(o[r], k);
      }
    }
#if HAS_OWN_B
    float dp[4][CPL];
    [[unroll]] for (uint r = 0u; r < 4u; ++r)
      [[unroll]] for (uint c = 0u; c < CPL; ++c) dp[r][c] = 0.0;
    for (uint e4 = 0u; e4 < B4; ++e4) {
      vec4 o[4];
      [[unroll]] for (uint r = 0u; r < 4u; ++r) o[r] = own_b[at_b(ty * 4u + r, e4)];
      [[unroll]] for (uint c = 0u; c < CPL; ++c) {
        vec4 k = other_b[at_b(tx + 16u * c, e4)];
        [[unroll]] for (uint r = 0u; r < 4u; ++r) dp[r][c] += dot(o[r], k);
      }
    }
#endif

    // Scores scaled and masked, -inf where the query does not see the key.
#if !QUERY_OWN
    float lse_c[CPL];
#if FORM == GRAD_K
    float delta_c[CPL];
#endif
    [[unroll]] for (uint c = 0u; c < CPL; ++c) {
      uint i = cur.first + tx + 16u * c;
      lse_c[c] = i < LQ ? lse_ld(cur.base + i) : 0.0;
#if FORM == GRAD_K
      delta_c[c] = i < LQ ? delta_ld(cur.base + i) : 0.0;
#endif
    }
#endif
    [[unroll]] for (uint r = 0u; r < 4u; ++r) {
      uint own = t0 + ty * 4u + r;
#if FORM == LSE
      float bm = -mn_inf();
#endif
      [[unroll]] for (uint c = 0u; c < CPL; ++c) {
        uint other = cur.first + tx + 16u * c;
#if QUERY_OWN
        uint i = own, j = other;
#else
        uint i = other, j = own;
#endif
        bool seen = own < OWN_ROWS && other < cur.limit && (CAUSAL == 0 || j <= i);
        float raw = s[r][c];
#if HAS_MASK
        float sc = seen ? scaled(raw) + mask_ld(mask_at(mbatch, cur.h, i, j)) : -mn_inf();
#else
        float sc = seen ? scaled(raw) : -mn_inf();
#endif
#if FORM == LSE
        s[r][c] = sc;
        bm = max(bm, sc);
#else
#if QUERY_OWN
        float p = sc == -mn_inf() ? 0.0 : exp(sc - lse_r[r]);
#else
        float p = sc == -mn_inf() ? 0.0 : exp(sc - lse_c[c]);
#endif
#if FORM == GRAD_Q
        s[r][c] = p * (dp[r][c] - delta_r[r]);
#elif FORM == GRAD_K
        s[r][c] = p * (dp[r][c] - delta_c[c]);
#else
        s[r][c] = p;
#endif
#endif
      }
#if FORM == LSE
      // The lane's running maximum and sum of row r.
      float mx = max(m[r], bm);
      if (mx != -mn_inf()) {
        float sum = 0.0;
        [[unroll]] for (uint c = 0u; c < CPL; ++c) {
          sum += s[r][c] == -mn_inf() ? 0.0 : exp(s[r][c] - mx);
        }
        l[r] = (m[r] == -mn_inf() ? 0.0 : l[r] * exp(m[r] - mx)) + sum;
        m[r] = mx;
      }
#endif
    }

#if FORM != LSE
    barrier();  // every lane is past reading the block the weights go into
    [[unroll]] for (uint c = 0u; c < CPL; ++c) {
      WEIGHTS[(tx + 16u * c) * R4 + ty] = vec4(s[0][c], s[1][c], s[2][c], s[3][c]);
    }
    barrier();
    for (uint j = 0u; j < BK; ++j) {
      vec4 w = WEIGHTS[j * R4 + ty];
      [[unroll]] for (uint q = 0u; q < QW; ++q) {
        vec4 cv = C_ROWS[AT_C(j, tx + 16u * q)];
        acc[0][q] += w.x * cv;
        acc[1][q] += w.y * cv;
        acc[2][q] += w.z * cv;
        acc[3][q] += w.w * cv;
      }
    }
#endif
  }

#if FORM == LSE
  // Each row's 16 lanes combined; no visible key (or all masked): -inf, as the reference.
  [[unroll]] for (uint r = 0u; r < 4u; ++r) red[(ty * 4u + r) * 16u + tx] = vec2(m[r], l[r]);
  barrier();
  if (tid < R && t0 + tid < OWN_ROWS) {
    float mx = -mn_inf();
    for (uint x = 0u; x < 16u; ++x) mx = max(mx, red[tid * 16u + x].x);
    float sum = 0.0;
    if (mx != -mn_inf()) {
      for (uint x = 0u; x < 16u; ++x) {
        vec2 ml = red[tid * 16u + x];
        sum += ml.x == -mn_inf() ? 0.0 : ml.y * exp(ml.x - mx);
      }
    }
    out_st(own_base + t0 + tid, mx == -mn_inf() ? -mn_inf() : mx + log(sum));
  }
#else
  [[unroll]] for (uint r = 0u; r < 4u; ++r) {
    uint own = t0 + ty * 4u + r;
    if (own < OWN_ROWS) {
      [[unroll]] for (uint q = 0u; q < QW; ++q) {
        uint at = (own_base + own) * W + (tx + 16u * q) * 4u;
#if FORM == GRAD_V
        vec4 o = acc[r][q];
#else
        vec4 o = vec4(scaled(acc[r][q].x), scaled(acc[r][q].y), scaled(acc[r][q].z),
                      scaled(acc[r][q].w));
#endif
        out_st(at, o.x);
        out_st(at + 1u, o.y);
        out_st(at + 2u, o.z);
        out_st(at + 3u, o.w);
      }
    }
  }
#endif
}
