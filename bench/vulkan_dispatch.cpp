// Vulkan layer benchmark, printing JSON:
//  - copy bandwidth of a compute copy kernel (bytes read + written over GPU time between
//    timestamps, median of many repetitions), and
//  - the cost of one dispatch plus barrier inside a recorded command buffer: a chain of tiny
//    dependent dispatches, GPU time per dispatch;
//  - with --latency, the floor of a dependent window as a decoding step has them: chains of
//    dispatches of 1 to 528 workgroups of 256 invocations, each reading what the previous one
//    wrote and, in the cold variant, a stream of its own that no earlier dispatch touched (a
//    GEMV's weights: one memory latency from DRAM), or in the cached variant the same region for
//    every dispatch (in L2 after the first), GPU time per dispatch; and the same chains
//    without barriers, each dispatch waiting in the kernel for a counter the previous one's
//    workgroups increment (its cold loads issued before the wait or after it).
// PyTorch counterpart: bench/vulkan_dispatch.py.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <meganeura/error.h>

#include "codegen/shader/shader_cache.h"
#include "vulkan/arena.h"
#include "vulkan/device.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace {

using namespace mn;
using Json = nlohmann::ordered_json;

// Each thread moves PER_THREAD uvec4 (16 B) values, all loads before the stores; consecutive
// threads touch consecutive addresses.
constexpr const char* kCopy = R"(#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint PER_THREAD = 4;
layout(set = 0, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(set = 0, binding = 1) writeonly buffer Dst { uvec4 dst[]; };
layout(push_constant) uniform Params { uint n; } params;
void main() {
  uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint base = group * gl_WorkGroupSize.x * PER_THREAD + gl_LocalInvocationID.x;
  uvec4 v[PER_THREAD];
  for (uint j = 0; j < PER_THREAD; ++j) {
    uint i = base + j * gl_WorkGroupSize.x;
    if (i < params.n) v[j] = src[i];
  }
  for (uint j = 0; j < PER_THREAD; ++j) {
    uint i = base + j * gl_WorkGroupSize.x;
    if (i < params.n) dst[i] = v[j];
  }
}
)";

// The smallest useful kernel: one workgroup updating 64 values in place.
constexpr const char* kTiny = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer X { uint x[]; };
layout(push_constant) uniform Params { uint step; } params;
void main() { x[gl_LocalInvocationID.x] = x[gl_LocalInvocationID.x] * 3u + params.step; }
)";

// One dependent window of a decoding step at its floor: every invocation reads its value of x
// (written by the previous dispatch), COLD uvec4 of this dispatch's own region of w, all loads
// issued together, and writes x back.
constexpr const char* kLatency = R"(#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint COLD = 0;
layout(set = 0, binding = 0) buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(push_constant) uniform Params { uint step; } params;
void main() {
  uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uint i = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uint v = x[i];
  uvec4 c[COLD > 0 ? COLD : 1];
  for (uint j = 0; j < COLD; ++j) c[j] = w[j * threads + i];
  uint acc = 0u;
  for (uint j = 0; j < COLD; ++j) acc += c[j].x ^ c[j].y ^ c[j].z ^ c[j].w;
  x[i] = v * 3u + params.step + acc;
}
)";

// The same window ordered by the kernels instead of a barrier: dispatch s (1-based) issues its
// cold loads, then one invocation waits until every workgroup of dispatch s - 1 has counted
// itself done (a device-scope acquire), the workgroup reads x, writes it back and counts itself
// done (a device-scope release). The recording leaves the barriers out; a fill zeroes the
// counters at the start of each submission. Lets workgroups of the next window start, and load
// what does not depend on the previous one, while that one runs.
constexpr const char* kLatencyFlags = R"(#version 450
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint COLD = 0;
layout(constant_id = 4) const bool EARLY = true;  // the cold loads before the wait
layout(set = 0, binding = 0) coherent buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer W { uvec4 w[]; };
layout(set = 0, binding = 2) coherent buffer F { uint done[]; };
layout(push_constant) uniform Params { uint step; } params;
uint cold_sum(uint threads, uint i) {
  uvec4 c[COLD > 0 ? COLD : 1];
  for (uint j = 0; j < COLD; ++j) c[j] = w[j * threads + i];
  uint acc = 0u;
  for (uint j = 0; j < COLD; ++j) acc += c[j].x ^ c[j].y ^ c[j].z ^ c[j].w;
  return acc;
}
void main() {
  uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uint i = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uint acc = EARLY ? cold_sum(threads, i) : 0u;
  if (params.step > 1u) {
    if (gl_LocalInvocationIndex == 0u) {
      while (atomicLoad(done[params.step - 2u], gl_ScopeDevice, gl_StorageSemanticsBuffer,
                        gl_SemanticsAcquire) < gl_NumWorkGroups.x) {
      }
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                   gl_SemanticsAcquireRelease);
  }
  if (!EARLY) acc = cold_sum(threads, i);
  uint v = x[i];
  x[i] = v * 3u + params.step + acc;
  controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                 gl_SemanticsAcquireRelease);
  if (gl_LocalInvocationIndex == 0u) {
    atomicAdd(done[params.step - 1u], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
              gl_SemanticsRelease);
  }
}
)";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

std::vector<uint32_t> random_words(size_t count, uint64_t seed) {
  std::vector<uint32_t> words(count);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& w : words) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    w = static_cast<uint32_t>(state >> 16);
  }
  return words;
}

// Source and destination of the copy, filled with random data once.
struct CopyBuffers {
  CopyBuffers(vk::Device& device, uint64_t requested)
      : bytes(requested / 16 * 16),
        arena(device, 2 * bytes, vk::ArenaOptions{vk::ArenaOptions::HostAccess::never, 0}) {
    // Each range starts a chunk or sits inside one (the placement rule), one descriptor each.
    dst_offset = bytes <= arena.chunk_bytes() && 2 * bytes > arena.chunk_bytes()
                     ? arena.chunk_bytes()
                     : bytes;
    if (dst_offset + bytes > arena.size() || !arena.placement_ok(0, bytes) ||
        !arena.placement_ok(dst_offset, bytes) ||
        arena.descriptor_count(arena.range(0, bytes)) > 1) {
      throw Error("copy buffer of " + std::to_string(bytes) + " bytes does not fit one binding");
    }
    data = random_words(bytes / 4, 42);
    arena.write(0, std::as_bytes(std::span(data)));
  }
  uint64_t bytes;
  vk::Arena arena;
  uint64_t dst_offset = 0;
  std::vector<uint32_t> data;
};

Json bench_copy(vk::Device& device, codegen::ShaderCache& shaders, CopyBuffers& buffers,
                uint32_t threads, uint32_t per_thread, int reps, int submits) {
  const auto& caps = device.capabilities();
  vk::KernelInterface k;
  k.buffer_count = 2;
  k.push_constant_bytes = 4;
  k.workgroup_size = {threads, 1, 1};
  k.specialization = {{3, per_thread}};
  codegen::CompileOptions options;
  options.name = "copy";
  options.target = codegen::target_env_for(caps.api_version);
  vk::Pipeline copy(device, shaders.get(kCopy, options), k, "copy");

  const uint64_t bytes = buffers.bytes;
  vk::Arena& arena = buffers.arena;
  const uint32_t n = static_cast<uint32_t>(bytes / 16);
  const uint64_t groups = (n + threads * per_thread - 1) / (threads * per_thread);
  const uint32_t gx =
      static_cast<uint32_t>(std::min<uint64_t>(groups, caps.compute.max_workgroup_count[0]));
  const uint32_t gy = static_cast<uint32_t>((groups + gx - 1) / gx);

  // Poison the destination so that the check sees what this kernel wrote.
  vk::Recording poison(device);
  poison.fill(arena.range(buffers.dst_offset, bytes), 0xFFFFFFFFu);
  poison.run();

  vk::Recording rec(device, {true, "copy"});
  for (int r = 0; r < reps; ++r) {
    vk::Dispatch d;
    d.pipeline = &copy;
    d.buffers = {{arena.range(0, bytes), vk::Access::read},
                 {arena.range(buffers.dst_offset, bytes), vk::Access::write}};
    d.set_push_constants(n);
    d.groups = {gx, gy, 1};
    rec.dispatch(std::move(d));
  }
  rec.run();  // warm-up
  std::vector<double> ms;
  for (int s = 0; s < submits; ++s) {
    rec.run();
    for (const auto& t : rec.timings()) ms.push_back(t.ms);
  }
  // Check a few windows of the copy (the whole of it when small).
  const uint64_t window = std::min<uint64_t>(bytes, 1 << 20);
  bool ok = true;
  for (uint64_t at : {uint64_t{0}, (bytes / 2) / 16 * 16, bytes - window}) {
    std::vector<uint32_t> back(window / 4);
    arena.read(buffers.dst_offset + at, std::as_writable_bytes(std::span(back)));
    ok = ok && std::memcmp(back.data(), buffers.data.data() + at / 4, window) == 0;
  }
  const double moved = 2.0 * static_cast<double>(bytes);
  const double med = median(ms);
  const double best = *std::min_element(ms.begin(), ms.end());
  return {{"buffer_bytes", bytes},
          {"bytes_moved_per_rep", 2 * bytes},
          {"reps", ms.size()},
          {"workgroup", threads},
          {"uvec4_per_thread", per_thread},
          {"groups", {gx, gy}},
          {"median_ms", med},
          {"min_ms", best},
          {"gbps_median", moved / (med * 1e-3) / 1e9},
          {"gbps_best", moved / (best * 1e-3) / 1e9},
          {"correct", ok}};
}

uint64_t arena_alignment(vk::Device& device) {
  return std::max<uint64_t>(4, device.capabilities().buffers.min_storage_buffer_offset_alignment);
}

Json bench_dispatch(vk::Device& device, codegen::ShaderCache& shaders, int chain, int submits) {
  vk::KernelInterface k;
  k.buffer_count = 1;
  k.push_constant_bytes = 4;
  k.workgroup_size = {64, 1, 1};
  codegen::CompileOptions options;
  options.name = "tiny";
  options.target = codegen::target_env_for(device.capabilities().api_version);
  vk::Pipeline tiny(device, shaders.get(kTiny, options), k, "tiny");
  vk::Arena arena(device, 256, vk::ArenaOptions{vk::ArenaOptions::HostAccess::never, 0});
  const auto initial = random_words(64, 5);
  arena.write(0, std::as_bytes(std::span(initial)));

  // Independent dispatches (each on its own 256 bytes) need no barriers: their cost is the
  // dispatch alone.
  const uint64_t slot = std::max<uint64_t>(256, arena_alignment(device));
  vk::Arena spread(device, slot * chain, vk::ArenaOptions{vk::ArenaOptions::HostAccess::never, 0});
  auto record = [&](bool per_operation, bool dependent = true) {
    auto rec = std::make_unique<vk::Recording>(
        device, vk::RecordingOptions{per_operation, "chain", !per_operation});
    for (int s = 0; s < chain; ++s) {
      vk::Dispatch d;
      d.pipeline = &tiny;
      d.buffers = {
          {dependent ? arena.range(0, 256) : spread.range(s * slot, 256), vk::Access::read_write}};
      d.set_push_constants(static_cast<uint32_t>(s + 1));
      rec->dispatch(std::move(d));
    }
    return rec;
  };
  auto total = record(false);
  total->run();
  std::vector<double> per_dispatch_us, wall_us;
  for (int s = 0; s < submits; ++s) {
    const auto start = std::chrono::steady_clock::now();
    total->run();
    const double wall =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    per_dispatch_us.push_back(total->total_ms() * 1e3 / chain);
    wall_us.push_back(wall / chain);
  }
  auto independent = record(false, false);
  independent->run();
  std::vector<double> independent_us;
  for (int s = 0; s < submits; ++s) {
    independent->run();
    independent_us.push_back(independent->total_ms() * 1e3 / chain);
  }
  auto profiled = record(true);
  profiled->run();
  std::vector<double> op_us;
  for (const auto& t : profiled->timings()) op_us.push_back(t.ms * 1e3);

  // 2 + submits runs of the chain: check the values.
  std::vector<uint32_t> expected = initial;
  for (int run = 0; run < 2 + submits; ++run) {
    for (int s = 0; s < chain; ++s) {
      for (auto& v : expected) v = v * 3u + static_cast<uint32_t>(s + 1);
    }
  }
  std::vector<uint32_t> back(64);
  arena.read(0, std::as_writable_bytes(std::span(back)));
  return {
      {"chain", chain},
      {"barriers", total->barrier_count()},
      {"submits", submits},
      {"us_per_dispatch_median", median(per_dispatch_us)},
      {"us_per_dispatch_min", *std::min_element(per_dispatch_us.begin(), per_dispatch_us.end())},
      {"us_per_dispatch_wall_median", median(wall_us)},
      {"us_per_dispatch_profiled_median", median(op_us)},
      {"independent_barriers", independent->barrier_count()},
      {"us_per_independent_dispatch_median", median(independent_us)},
      {"correct", back == expected}};
}

// How a chain's dispatches are ordered: by barriers, or by counters in the kernels
// (kLatencyFlags) with the cold loads issued before the wait or after it.
enum class Order { barriers, counters_loads_first, counters };

const char* order_name(Order o) {
  switch (o) {
    case Order::barriers:
      return "barriers";
    case Order::counters_loads_first:
      return "counters, cold loads first";
    case Order::counters:
      return "counters";
  }
  return "";
}

constexpr uint32_t kLatencyThreads = 256;

// The cold stream the chains read: a buffer larger than the caches, random words.
struct ColdStream {
  static constexpr uint64_t kBytes = 512ull << 20;
  explicit ColdStream(vk::Device& device)
      : arena(device, kBytes, vk::ArenaOptions{vk::ArenaOptions::HostAccess::never, 0}),
        words(random_words(kBytes / 4, 11)) {
    arena.write(0, std::as_bytes(std::span(words)));
  }
  vk::Arena arena;
  std::vector<uint32_t> words;
};

// One chain of `chain` dependent dispatches of `groups` workgroups through `pipeline`, each
// reading `per` uvec4 an invocation from a region of `cold` of its own (regions cycle through
// it), ordered as `order` says (`counters`: the kernels' counters, zeroed at the start of each
// submission); GPU time per dispatch, checked against the same arithmetic on the host.
Json latency_case(vk::Device& device, const vk::Pipeline& pipeline, const ColdStream& cold,
                  vk::Arena& counters, Order order, uint32_t groups, uint32_t per, bool warm,
                  int chain, int submits) {
  const bool by_counters = order != Order::barriers;
  const uint64_t n = uint64_t{groups} * kLatencyThreads;
  // Each dispatch's region: a power of two, so that none straddles a chunk of the arena.
  const uint64_t region = std::bit_ceil(std::max<uint64_t>(16, n * 16 * per));
  // Warm: every dispatch reads the same region, in the cache after the first.
  const uint64_t regions =
      warm ? 1
           : std::min<uint64_t>(ColdStream::kBytes, cold.arena.chunk_bytes()) / region *
                 std::max<uint64_t>(1, ColdStream::kBytes / cold.arena.chunk_bytes());
  vk::Arena xs(device, n * 4, vk::ArenaOptions{vk::ArenaOptions::HostAccess::never, 0});
  std::vector<uint32_t> x = random_words(n, groups + per);
  xs.write(0, std::as_bytes(std::span(x)));
  const vk::Range counter_words = counters.range(0, 4 * static_cast<uint64_t>(chain));
  vk::Recording rec(device, vk::RecordingOptions{false, "latency", true});
  if (by_counters) rec.fill(counter_words, 0u);
  for (int s = 0; s < chain; ++s) {
    vk::Dispatch d;
    d.pipeline = &pipeline;
    // By counters: the kernels order their accesses to x and the counters themselves, so the
    // recorder is told they only read them (no barriers between the dispatches).
    d.buffers = {{xs.range(0, n * 4), by_counters ? vk::Access::read : vk::Access::read_write},
                 {cold.arena.range((s % regions) * region, region), vk::Access::read}};
    if (by_counters) d.buffers.push_back({counter_words, vk::Access::read});
    d.set_push_constants(static_cast<uint32_t>(s + 1));
    d.groups = {groups, 1, 1};
    rec.dispatch(std::move(d));
  }
  std::vector<double> us;
  for (int r = 0; r < 1 + submits; ++r) {
    rec.run();
    if (r > 0) us.push_back(rec.total_ms() * 1e3 / chain);
  }
  for (int r = 0; r < 1 + submits; ++r) {
    for (int s = 0; s < chain; ++s) {
      const uint64_t base = (s % regions) * region / 4;
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t acc = 0;
        for (uint32_t j = 0; j < per; ++j) {
          const uint32_t* c = &cold.words[base + (j * n + i) * 4];
          acc += c[0] ^ c[1] ^ c[2] ^ c[3];
        }
        x[i] = x[i] * 3u + static_cast<uint32_t>(s + 1) + acc;
      }
    }
  }
  std::vector<uint32_t> back(n);
  xs.read(0, std::as_writable_bytes(std::span(back)));
  return {{"ordered_by", order_name(order)},
          {"barriers", rec.barrier_count()},
          {"workgroups", groups},
          {"invocations", kLatencyThreads},
          {"cold_bytes_per_dispatch", n * 16 * per},
          {"reads", per == 0 ? "none" : (warm ? "cached" : "cold")},
          {"us_per_dispatch_median", median(us)},
          {"us_per_dispatch_min", *std::min_element(us.begin(), us.end())},
          {"correct", back == x}};
}

// Chains of dependent dispatches of 1 to 528 workgroups, with and without cold reads, ordered by
// barriers and by counters (latency_case).
Json bench_latency(vk::Device& device, codegen::ShaderCache& shaders, int chain, int submits) {
  const ColdStream cold(device);
  vk::Arena counters(device, 4 * static_cast<uint64_t>(chain),
                     vk::ArenaOptions{vk::ArenaOptions::HostAccess::never, 0});
  codegen::CompileOptions options;
  options.name = "latency";
  options.target = codegen::target_env_for(device.capabilities().api_version);
  const auto spirv = shaders.get(kLatency, options);
  options.name = "latency_flags";
  const auto counters_spirv = shaders.get(kLatencyFlags, options);
  Json rows = Json::array();
  bool ok = true;
  for (Order order : {Order::barriers, Order::counters_loads_first, Order::counters}) {
    for (uint32_t per : {0u, 4u}) {
      // Without cold loads, the counters' two orders are one.
      if (order == Order::counters && per == 0) continue;
      const bool by_counters = order != Order::barriers;
      vk::KernelInterface k;
      k.buffer_count = by_counters ? 3 : 2;
      k.push_constant_bytes = 4;
      k.workgroup_size = {kLatencyThreads, 1, 1};
      k.specialization = {{3, per}};
      if (by_counters) k.specialization.push_back({4, order == Order::counters ? 0u : 1u});
      const vk::Pipeline pipeline(device, by_counters ? counters_spirv : spirv, k, "latency");
      for (uint32_t groups : {1u, 16u, 132u, 528u}) {
        // The same reads from the cache (one region for every dispatch): what a window's
        // weights cost when an earlier window has brought them into L2.
        for (bool warm : {false, true}) {
          if (warm && (per == 0 || order != Order::barriers)) continue;
          Json row = latency_case(device, pipeline, cold, counters, order, groups, per, warm, chain,
                                  submits);
          ok = ok && row["correct"].get<bool>();
          rows.push_back(std::move(row));
        }
      }
    }
  }
  return {{"chain", chain}, {"cases", rows}, {"correct", ok}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Vulkan copy bandwidth and dispatch+barrier cost (JSON)", "vulkan_dispatch"};
  double copy_mib = 0;
  int reps = 20, submits = 10, chain = 1000;
  bool sweep = false, latency = false;
  app.add_option("--copy-mib", copy_mib, "copy buffer size (default: 1024 on a GPU, 64 on a CPU)");
  app.add_option("--reps", reps, "copy dispatches per submission");
  app.add_option("--submits", submits, "timed submissions");
  app.add_option("--chain", chain, "dependent dispatches in the chain");
  app.add_flag("--sweep", sweep, "also time other workgroup sizes and values per thread");
  app.add_flag("--latency", latency, "also time chains of dependent windows of 1-528 workgroups");
  CLI11_PARSE(app, argc, argv);
  try {
    vk::Device device;
    codegen::ShaderCache shaders;
    const auto& caps = device.capabilities();
    if (copy_mib <= 0) copy_mib = caps.device_type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 64 : 1024;
    Json out;
    out["bench"] = "vulkan_dispatch";
    out["device"] = caps.name;
    out["driver"] = caps.driver_name + " " + caps.driver_info + " (" + caps.driver_version + ")";
    out["api_version"] = caps.api_version_text;
    CopyBuffers buffers(device, static_cast<uint64_t>(copy_mib * (1 << 20)));
    out["copy"] = bench_copy(device, shaders, buffers, 256, 4, reps, submits);
    bool ok = out["copy"]["correct"].get<bool>();
    if (sweep) {
      out["copy_sweep"] = Json::array();
      for (uint32_t threads : {128u, 256u, 512u, 1024u}) {
        for (uint32_t per_thread : {1u, 2u, 4u, 8u}) {
          Json r = bench_copy(device, shaders, buffers, threads, per_thread, 10, 3);
          ok = ok && r["correct"].get<bool>();
          out["copy_sweep"].push_back({{"workgroup", threads},
                                       {"uvec4_per_thread", per_thread},
                                       {"gbps_median", r["gbps_median"]},
                                       {"gbps_best", r["gbps_best"]}});
        }
      }
    }
    out["dispatch"] = bench_dispatch(device, shaders, chain, submits);
    if (latency) {
      out["latency"] = bench_latency(device, shaders, std::min(chain, 200), submits);
      ok = ok && out["latency"]["correct"].get<bool>();
    }
    std::printf("%s\n", out.dump(2).c_str());
    ok = ok && out["dispatch"]["correct"].get<bool>();
    return ok ? 0 : 3;
  } catch (const mn::Error& e) {
    std::fprintf(stderr, "vulkan_dispatch: %s\n", e.what());
    return 1;
  }
}
