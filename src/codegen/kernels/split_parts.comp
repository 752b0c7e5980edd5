// What kernels splitting a tile's work among workgroups share (filled into matmul_tensor.comp,
// attention_tensor.comp and attention_training_tensor.comp where they split): the parts'
// results P, coherent since a tile's last workgroup reads what the others stored, and the tiles'
// counts of finished parts in persistent words (zero before the first run: the last part sets its
// tile's count back to zero).
layout(std430, set = 0, binding = @P_BINDING@) coherent buffer BufferP { float P[]; };
layout(std430, set = 0, binding = @DONE_BINDING@) buffer Counters { uint done[]; };
shared bool last_sh;

// Counts this workgroup's part of tile t, one of `parts`, once its results are stored in P; true
// for the tile's last part to finish, which then sees every other part's stores.
bool last_to_finish(uint t, uint parts) {
  memoryBarrierBuffer();
  barrier();
  if (gl_LocalInvocationIndex == 0u) {
    last_sh = atomicAdd(done[t], 1u) == parts - 1u;
    if (last_sh) done[t] = 0u;
  }
  barrier();
  if (!last_sh) return false;
  memoryBarrierBuffer();
  return true;
}
