#version 450
// Pulls the buffers bound here into the GPU's cache for the kernels of the next barrier window
// (plan/cache_prefetch.h): every invocation reads one word of each 32-byte sector it is given
// (the cache fills whole sectors) and keeps nothing. The sink is written only where the words'
// XOR equals a constant, which no compiler can rule out, so the loads stay; when it is written
// the value is never read.
layout(local_size_x_id = 0) in;
@BUFFERS@
layout(set = 0, binding = @SINK_BINDING@) writeonly buffer Sink { uint sink[]; };

const uint kSectorWords = 8u;

void main() {
  const uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint t = gl_GlobalInvocationID.x;
  uint acc = 0u;
@LOADS@
  if (acc == 0x9e3779b9u) sink[gl_LocalInvocationIndex % @SINK_WORDS@u] = acc;
}
