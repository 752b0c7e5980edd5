// The blocks of the other side that attention's training kernels walk (filled into
// attention_training_tiled.comp and attention_training_coop.comp as their BLOCKS field, after their R, BK,
// QUERY_OWN and CAUSAL and the declarations' sizes): the keys a tile of R query rows sees, or the
// query rows of every query head of the group that see a tile of R keys.

// Block n of the other side: its rows' first global row (`base`, row 0 of its head), the first
// row of the block within the head, the end of the head's valid rows, and the query head.
struct Block {
  uint base, first, limit, h;
};

Block block_of(uint n, uint b, uint hh, uint t0) {
  Block k;
#if QUERY_OWN
  k.h = hh;
  k.base = (b * HKV + hh / GROUP) * LK;
  k.first = n * BK;
  k.limit = CAUSAL != 0 ? min(LK, t0 + R) : LK;
#else
  // Query rows above the tile's first key never see it (causal).
  uint start = CAUSAL != 0 ? t0 : 0u;
  uint per_head = LQ > start ? (LQ - start + BK - 1u) / BK : 1u;
  k.h = hh * GROUP + n / per_head;
  k.base = (b * HQ + k.h) * LQ;
  k.first = start + (n % per_head) * BK;
  k.limit = LQ;
#endif
  return k;
}

uint block_count(uint t0) {
#if QUERY_OWN
  uint reach = CAUSAL != 0 ? min(LK, t0 + R) : LK;
  return (reach + BK - 1u) / BK;
#else
  uint start = CAUSAL != 0 ? t0 : 0u;
  return LQ > start ? GROUP * ((LQ - start + BK - 1u) / BK) : 0u;
#endif
}
