// GPU lowering of sample_tokens: one workgroup per row of logits, no sorting.
//
// The kept tokens of top-k and top-p are those whose value's order-preserving 32-bit key is at
// least a threshold, and each threshold is found 4 bits at a time from the top (8 passes over
// the row, each weighing 16 bins by workgroup sums): top-k's is the largest key with at least k
// keys >= it, top-p's the largest key whose kept keys >= it hold at least top_p of the kept
// probability.
// Then the Gumbel-max draw is a workgroup argmax. Ties break to the lowest index, as the
// reference's.
//
// A row is walked by up to 1024 lanes, each loading eight logits before using them: a walk of
// one load at a time waits out the memory latency once per element, which made a 150k-token
// row take milliseconds. With subgroup arithmetic the 16 bins of a pass are summed across the
// workgroup at once (two barriers, not sixteen workgroup sums).
#include <algorithm>
#include <bit>

#include "codegen/glsl.h"
#include "codegen/kernel.h"
#include "codegen/lower_families.h"

namespace mn::codegen {

namespace {

using glsl::ulit;

constexpr uint32_t kLanes = 1024;
// Logits each lane loads before using them.
constexpr uint32_t kInFlight = 8;

// Workgroup reductions and the per-token arithmetic the reference spells in C++
// (ir/ops/sampling.h: mix, token_bits, uniform).
const char* kHelpers = R"(
shared float red_f[NT];
shared uint red_u[NT];
float mn_inf() { return uintBitsToFloat(0x7f800000u); }
float wg_sum(float v) {
  uint t = gl_LocalInvocationID.x;
  red_f[t] = v;
  barrier();
  for (uint h = NT / 2u; h > 0u; h >>= 1) {
    if (t < h) red_f[t] += red_f[t + h];
    barrier();
  }
  float r = red_f[0];
  barrier();
  return r;
}
float wg_max(float v) {
  uint t = gl_LocalInvocationID.x;
  red_f[t] = v;
  barrier();
  for (uint h = NT / 2u; h > 0u; h >>= 1) {
    if (t < h) red_f[t] = max(red_f[t], red_f[t + h]);
    barrier();
  }
  float r = red_f[0];
  barrier();
  return r;
}
// The largest value and, among equal ones, the lowest index (index V: none).
uint wg_argmax(float v, uint index) {
  uint t = gl_LocalInvocationID.x;
  red_f[t] = v;
  red_u[t] = index;
  barrier();
  for (uint h = NT / 2u; h > 0u; h >>= 1) {
    if (t < h) {
      float w = red_f[t + h];
      uint j = red_u[t + h];
      bool better = j < V && (red_u[t] >= V || w > red_f[t] || (w == red_f[t] && j < red_u[t]));
      if (better) {
        red_f[t] = w;
        red_u[t] = j;
      }
    }
    barrier();
  }
  uint r = red_u[0];
  barrier();
  return r;
}
// Keys ordered as the floats (-0 as +0: they are equal values).
uint key_of(float v) {
  uint b = floatBitsToUint(v);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}
uint mn_mix(uint x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
// -log(u) for u = ((bits >> 9) + 0.5) / 2^23: near u = 1 from the series of -log(1 - w), where
// log(u) would lose the small result to rounding.
float exponential(uint bits) {
  float u = (float(bits >> 9) + 0.5) * (1.0 / 8388608.0);
  float w = 1.0 - u;
  if (w < 0.015625) return w * (1.0 + w * (0.5 + w * (1.0 / 3.0 + w * (0.25 + w * 0.2))));
  return -log(u);
}
float logit(uint base, uint t) {
  float x = logits_ld(base + t);
  return isnan(x) ? -mn_inf() : x;
}
// The row's logits of this lane, INF at a time (loaded together, then used in index order;
// past the row at the last logit, never used: a load inside a branch may wait out its latency
// before the next is issued).
#define ROW_WALK_BEGIN \
  for (uint t0 = gl_LocalInvocationID.x; t0 < V; t0 += INF * NT) { \
    float xs[INF]; \
    for (uint u = 0u; u < INF; ++u) { \
      xs[u] = logit(base, min(t0 + u * NT, V - 1u)); \
    } \
    for (uint u = 0u; u < INF; ++u) { \
      uint t = t0 + u * NT; \
      if (t >= V) break; \
      float x = xs[u];
#define ROW_WALK_END }}
)";

const char* kThreshold = R"(
// The largest key tau such that the kept values (key >= lo) with keys >= tau weigh at least
// `need` (weight 1 each, or exp(v - m) with `mass`), found 4 bits a pass from the top: a pass
// weighs the 16 values of the next digit among the keys that share the digits found so far.
// Where no digit reaches `need` (rounding), the digit is 0, as a failed bisection step.
uint threshold(uint base, float T, uint lo, bool mass, float m, float need) {
  uint lane = gl_LocalInvocationID.x, prefix = 0u;
  float above = 0.0;  // the weight of the keys above the prefix's range
  for (int shift = 28; shift >= 0; shift -= 4) {
    float acc[16];
    for (int b = 0; b < 16; ++b) acc[b] = 0.0;
    uint high = shift == 28 ? 0u : 0xffffffffu << uint(shift + 4);
    ROW_WALK_BEGIN
      float v = x / T;
      uint key = key_of(v);
      if (key < lo || (key & high) != prefix) continue;
      acc[(key >> uint(shift)) & 15u] += mass ? exp(v - m) : 1.0;
    ROW_WALK_END
    wg_sum16(acc);
    uint digit = 0u;
    float sum = above;
    bool found = false;
    for (int b = 15; b >= 0; --b) {
      float w = acc[b];
      if (found) continue;
      if (sum + w >= need) {
        digit = uint(b);
        found = true;
        above = sum;
      }
      sum += w;
    }
    prefix |= digit << uint(shift);
  }
  return prefix;
}
)";

// The 16 bins of every lane summed over the workgroup, in place: with subgroup arithmetic,
// one subgroupAdd per bin and the subgroups' sums added in shared memory; otherwise 16
// workgroup sums.
const char* kSum16Subgroup = R"(
shared float bins_sh[NT / 4u * 16u];
shared float total_sh[16];
void wg_sum16(inout float acc[16]) {
  for (int b = 0; b < 16; ++b) acc[b] = subgroupAdd(acc[b]);
  if (subgroupElect()) {
    for (uint b = 0u; b < 16u; ++b) bins_sh[gl_SubgroupID * 16u + b] = acc[b];
  }
  barrier();
  uint lane = gl_LocalInvocationID.x;
  if (lane < 16u) {
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; ++i) s += bins_sh[i * 16u + lane];
    total_sh[lane] = s;
  }
  barrier();
  for (int b = 0; b < 16; ++b) acc[b] = total_sh[b];
}
)";
const char* kSum16Shared = R"(
void wg_sum16(inout float acc[16]) {
  for (int b = 0; b < 16; ++b) acc[b] = wg_sum(acc[b]);
}
)";

// The kernel's main: *_ROWS says whether a parameter has one element per row or one in all.
std::string main_body() {
  return R"(void main() {
  uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (row >= B) return;
  uint lane = gl_LocalInvocationID.x, base = row * V;
  float T = temp_ld(TEMP_ROWS ? row : 0u);
  if (!(T > 0.0)) {  // greedy
    float best = -mn_inf();
    uint at = V;
    ROW_WALK_BEGIN
      if (at == V || x > best) { best = x; at = t; }
    ROW_WALK_END
    uint r = wg_argmax(best, at);
    if (lane == 0u) out_sti(row, int(r < V ? r : 0u));
    return;
  }
  int k = topk_ldi(TOPK_ROWS ? row : 0u);
  float p = topp_ld(TOPP_ROWS ? row : 0u);
  uint lo = 0u;  // kept: key >= lo
  if (k > 0 && uint(k) < V) lo = threshold(base, T, 0u, false, 0.0, float(k));
  if (p < 1.0) {
    float m = -mn_inf();
    ROW_WALK_BEGIN
      float v = x / T;
      if (key_of(v) >= lo) m = max(m, v);
    ROW_WALK_END
    m = wg_max(m);
    float z = 0.0;
    ROW_WALK_BEGIN
      float v = x / T;
      if (key_of(v) >= lo) z += exp(v - m);
    ROW_WALK_END
    uint tau = threshold(base, T, lo, true, m, p * wg_sum(z));
    lo = max(lo, min(tau, key_of(m)));  // the most probable tokens always stay
  }
  uint seed = uint(seed_ldi(0u)), step = uint(step_ldi(0u));
  uint key = mn_mix(mn_mix(mn_mix(seed) + step) + row);
  float best = -mn_inf();
  uint at = V;
  ROW_WALK_BEGIN
    float v = x / T;
    if (key_of(v) < lo) continue;
    float z = v - log(exponential(mn_mix(key + t)));
    if (at == V || z > best) { best = z; at = t; }
  ROW_WALK_END
  uint r = wg_argmax(best, at);
  if (lane == 0u) out_sti(row, int(r < V ? r : 0u));
}
)";
}

bool per_row(const TensorType& t, int64_t rows) {
  return t.rank() == 1 && t.shape[0] == rows && rows > 1;
}

Lowering lower_sample_tokens(const LowerContext& ctx) {
  glsl::require_storage(ctx);
  const std::span<const TensorType> in = ctx.inputs;
  const int64_t rows = in[0].shape[0], vocab = in[0].shape[1];
  if (rows == 0) return {};
  const uint32_t lanes =
      std::bit_floor(std::clamp<uint32_t>(ctx.device.max_workgroup_invocations, 32, kLanes));
  std::string s = glsl::header();
  const char* names[] = {"logits", "temp", "topk", "topp", "seed", "step"};
  KernelLaunch k;
  for (uint32_t i = 0; i < 6; ++i) {
    s += glsl::buffer(i, in[i].dtype, names[i], true);
    k.bindings.push_back({ArgRef::input(static_cast<int>(i)), false});
  }
  s += glsl::buffer(6, DType::i32, "out", false);
  k.bindings.push_back({ArgRef::output(), true});
  auto flag = [&](int i) { return per_row(in[static_cast<size_t>(i)], rows) ? "true" : "false"; };
  s += "const uint B = " + ulit(rows) + ", V = " + ulit(vocab) + ", NT = " + ulit(lanes) +
       ", INF = " + ulit(kInFlight) + ";\n";
  s += std::string("const bool TEMP_ROWS = ") + flag(1) + ", TOPK_ROWS = " + flag(2) +
       ", TOPP_ROWS = " + flag(3) + ";\n";
  // The subgroup sums need subgroups of at least 4 lanes (bins_sh holds NT / 4 of them).
  const bool subgroups = ctx.device.subgroup_add && ctx.device.subgroup_size >= 4;
  s += kHelpers + std::string(subgroups ? kSum16Subgroup : kSum16Shared) + kThreshold +
       main_body();
  if (subgroups) {
    s = glsl::require_extensions(std::move(s), {"GL_KHR_shader_subgroup_basic",
                                                "GL_KHR_shader_subgroup_arithmetic"});
  }
  k.name = "sample_tokens";
  k.glsl = std::move(s);
  k.workgroup = {lanes, 1, 1};
  k.groups = glsl::linear_grid(static_cast<uint64_t>(rows) * lanes, ctx.device, lanes).groups;
  Lowering low;
  low.launches.push_back(std::move(k));
  return low;
}

}  // namespace

void register_sampling_lowerings(LoweringRegistry& r) {
  r.add("sample_tokens", lower_sample_tokens);
}

}  // namespace mn::codegen
