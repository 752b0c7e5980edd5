#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include <meganeura/error.h>

#include "vulkan/arena.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"
#include "vulkan_test.h"

namespace mn::vk {
namespace {

using testing::bytes_of;
using testing::random_words;
using testing::writable_bytes_of;

class Dispatches : public testing::VulkanTest {};

constexpr const char* kSaxpy = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Params { uint n; float a; } params;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < params.n) y[i] = params.a * x[i] + y[i];
}
)";

// dst = src * 3 + step: exact in uint32 and order-dependent, so a missing barrier or a wrong
// order changes the result.
constexpr const char* kStep = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Params { uint n; uint step; } params;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < params.n) dst[i] = src[i] * 3u + params.step;
}
)";

struct SaxpyParams {
  uint32_t n;
  float a;
};
struct StepParams {
  uint32_t n;
  uint32_t step;
};

uint32_t groups_for(uint32_t n, uint32_t size) { return (n + size - 1) / size; }

TEST_F(Dispatches, SaxpyMatchesTheCpu) {
  const uint32_t n = 10007;
  KernelInterface k;
  k.buffer_count = 2;
  k.push_constant_bytes = sizeof(SaxpyParams);
  k.workgroup_size = {128, 1, 1};
  Pipeline saxpy(device(), compile(kSaxpy, "saxpy"), k, "saxpy");

  std::vector<float> x(n), y(n);
  const auto bits = random_words(2 * n, 7);
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(bits[i] % 2001) / 100.0f - 10.0f;
    y[i] = static_cast<float>(bits[n + i] % 2001) / 100.0f - 10.0f;
  }
  const uint64_t bytes = n * sizeof(float);
  const uint64_t y_offset = (bytes + 255) / 256 * 256;
  Arena arena(device(), y_offset + bytes);
  arena.write(0, bytes_of(x));
  arena.write(y_offset, bytes_of(y));

  Recording rec(device(), {false, "saxpy"});
  Dispatch d;
  d.pipeline = &saxpy;
  d.buffers = {{arena.range(0, bytes), Access::read}, {arena.range(y_offset, bytes)}};
  d.set_push_constants(SaxpyParams{n, 2.5f});
  d.groups = {groups_for(n, 128), 1, 1};
  rec.dispatch(std::move(d));
  rec.run();

  std::vector<float> out(n);
  arena.read(y_offset, writable_bytes_of(out));
  for (uint32_t i = 0; i < n; ++i) {
    const float expected = 2.5f * x[i] + y[i];
    ASSERT_NEAR(out[i], expected, 1e-5f * (1 + std::fabs(expected))) << "element " << i;
  }
}

TEST_F(Dispatches, DependentChainRecordedOnceResubmitted) {
  const uint32_t n = 4099, chain = 100, submissions = 10;
  KernelInterface k;
  k.buffer_count = 2;
  k.push_constant_bytes = sizeof(StepParams);
  k.workgroup_size = {64, 1, 1};
  Pipeline step(device(), compile(kStep, "step"), k, "step");

  const uint64_t bytes = n * 4, stride = (bytes + 255) / 256 * 256;
  Arena arena(device(), 2 * stride);
  const Range ping = arena.range(0, bytes), pong = arena.range(stride, bytes);
  const auto initial = random_words(n, 11);
  arena.write(0, bytes_of(initial));

  // ping -> pong -> ping ...: each dispatch reads what the previous one wrote (an even chain
  // length ends in ping, where the next submission starts).
  Recording rec(device(), {false, "chain", true});
  for (uint32_t s = 0; s < chain; ++s) {
    Dispatch d;
    d.pipeline = &step;
    const bool forward = s % 2 == 0;
    d.buffers = {{forward ? ping : pong, Access::read}, {forward ? pong : ping, Access::write}};
    d.set_push_constants(StepParams{n, s + 1});
    d.groups = {groups_for(n, 64), 1, 1};
    rec.dispatch(std::move(d));
  }
  for (uint32_t i = 0; i < submissions; ++i) rec.run();
  EXPECT_EQ(rec.dispatch_count(), chain);
  EXPECT_EQ(rec.barrier_count(), chain - 1);
  EXPECT_GT(rec.total_ms(), 0.0);
  EXPECT_TRUE(rec.timings().empty());  // total_time keeps no per-operation times

  std::vector<uint32_t> expected = initial;
  for (uint32_t i = 0; i < submissions; ++i) {
    for (uint32_t s = 0; s < chain; ++s) {
      for (auto& v : expected) v = v * 3u + (s + 1);
    }
  }
  std::vector<uint32_t> out(n);
  arena.read(0, writable_bytes_of(out));
  EXPECT_TRUE(out == expected);
}

TEST_F(Dispatches, IndependentDispatchesShareABarrierFreeWindow) {
  const uint32_t n = 256, parts = 8;
  KernelInterface k;
  k.buffer_count = 2;
  k.push_constant_bytes = sizeof(StepParams);
  k.workgroup_size = {64, 1, 1};
  Pipeline step(device(), compile(kStep, "step"), k, "step");
  const uint64_t bytes = n * 4;
  Arena arena(device(), 2 * parts * bytes + bytes);
  std::vector<uint32_t> input(parts * n);
  for (uint32_t i = 0; i < input.size(); ++i) input[i] = i;
  arena.write(0, bytes_of(input));

  Recording rec(device(), {true, "independent"});
  // Eight dispatches on disjoint ranges: no barrier between them.
  for (uint32_t p = 0; p < parts; ++p) {
    Dispatch d;
    d.pipeline = &step;
    d.buffers = {{arena.range(p * bytes, bytes), Access::read},
                 {arena.range((parts + p) * bytes, bytes), Access::write}};
    d.set_push_constants(StepParams{n, p});
    d.groups = {groups_for(n, 64), 1, 1};
    rec.dispatch(std::move(d));
  }
  // This one reads a range written above: one barrier.
  Dispatch last;
  last.pipeline = &step;
  last.label = "consumer";
  last.buffers = {{arena.range((parts + 3) * bytes, bytes), Access::read},
                  {arena.range(2 * parts * bytes, bytes), Access::write}};
  last.set_push_constants(StepParams{n, 100});
  last.groups = {groups_for(n, 64), 1, 1};
  rec.dispatch(std::move(last));
  rec.run();
  EXPECT_EQ(rec.barrier_count(), 1u);

  std::vector<uint32_t> out(n);
  arena.read(2 * parts * bytes, writable_bytes_of(out));
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t mid = (3 * n + i) * 3u + 3u;
    ASSERT_EQ(out[i], mid * 3u + 100u);
  }
  ASSERT_EQ(rec.timings().size(), parts + 1);
  EXPECT_EQ(rec.timings().back().label, "consumer");
  EXPECT_EQ(rec.timings().front().label, "step");
  for (const auto& t : rec.timings()) EXPECT_GE(t.ms, 0.0);
  EXPECT_GT(rec.total_ms(), 0.0);
}

// A range longer than one binding (lavapipe: 128 MiB) bound as an array of descriptors.
TEST_F(Dispatches, KernelAddressesMoreThanOneBinding) {
  constexpr const char* kAddOne = R"(#version 450
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer Data { uint v[]; } data[2];
layout(push_constant) uniform Params { uint n; uint chunk_shift; } params;
void main() {
  // The chunk index is uniform across a workgroup (chunks hold whole workgroups), which
  // shaderStorageBufferArrayDynamicIndexing allows.
  uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  uint mask = (1u << params.chunk_shift) - 1u;
  for (uint i = gl_GlobalInvocationID.x; i < params.n; i += stride) {
    uint c = i >> params.chunk_shift;
    data[c].v[i & mask] += 1u;
  }
}
)";
  const auto& caps = device().capabilities();
  const uint64_t limit = caps.buffers.max_storage_buffer_range;
  // Over one chunk; on devices with large limits, smaller chunks give the same layout.
  ArenaOptions options;
  options.chunk_bytes = std::min<uint64_t>(std::bit_floor(limit), 128ull << 20);
  const uint64_t bytes = options.chunk_bytes + (4ull << 20);
  Arena arena(device(), bytes, options);
  ASSERT_EQ(arena.chunk_count(), 2u);

  KernelInterface k;
  k.buffer_count = 1;
  k.buffer_array_sizes = {2};
  k.push_constant_bytes = 8;
  k.workgroup_size = {256, 1, 1};
  Pipeline add_one(device(), compile(kAddOne, "add_one"), k, "add_one");

  const uint32_t n = static_cast<uint32_t>(bytes / 4);
  std::vector<uint32_t> data = random_words(n, 3);
  arena.write(0, bytes_of(data));
  Recording rec(device(), {false, "split"});
  Dispatch d;
  d.pipeline = &add_one;
  d.buffers = {{arena.all(), Access::read_write}};
  d.push_constants.resize(8);
  const uint32_t params[2] = {n, arena.chunk_shift() - 2};
  std::memcpy(d.push_constants.data(), params, 8);
  d.groups = {4096, 1, 1};
  rec.dispatch(std::move(d));
  rec.run();

  std::vector<uint32_t> out(n);
  arena.read(0, writable_bytes_of(out));
  for (uint32_t i = 0; i < n; ++i) {
    if (out[i] != data[i] + 1) FAIL() << "element " << i << " (chunk " << (i >> params[1]) << ")";
  }
}

TEST_F(Dispatches, AsynchronousWaitAndPolling) {
  KernelInterface k;
  k.buffer_count = 2;
  k.push_constant_bytes = sizeof(StepParams);
  k.workgroup_size = {64, 1, 1};
  Pipeline step(device(), compile(kStep, "step"), k, "step");
  Arena arena(device(), 2048);
  std::vector<uint32_t> zeros(256, 1);
  arena.write(0, bytes_of(zeros));
  Recording rec(device());
  Dispatch d;
  d.pipeline = &step;
  d.buffers = {{arena.range(0, 1024), Access::read}, {arena.range(1024, 1024), Access::write}};
  d.set_push_constants(StepParams{256, 5});
  d.groups = {4, 1, 1};
  rec.dispatch(std::move(d));
  EXPECT_TRUE(rec.poll());  // nothing submitted yet
  rec.submit();
  auto done = rec.wait_async();
  done.get();
  EXPECT_TRUE(rec.poll());
  std::vector<uint32_t> out(256);
  arena.read(1024, writable_bytes_of(out));
  for (uint32_t v : out) ASSERT_EQ(v, 8u);
  EXPECT_THROW(rec.fill(arena.range(0, 16), 0), Error);  // finished
}

TEST_F(Dispatches, InterfaceMismatchesAreErrors) {
  KernelInterface k;
  k.buffer_count = 2;
  k.push_constant_bytes = sizeof(StepParams);
  k.workgroup_size = {64, 1, 1};
  const auto spirv = compile(kStep, "step");
  Pipeline step(device(), spirv, k, "step");
  Arena arena(device(), 4096);
  Recording rec(device());

  Dispatch wrong_count;
  wrong_count.pipeline = &step;
  wrong_count.buffers = {{arena.range(0, 1024)}};
  wrong_count.set_push_constants(StepParams{1, 1});
  EXPECT_THROW(rec.dispatch(wrong_count), Error);

  Dispatch wrong_push;
  wrong_push.pipeline = &step;
  wrong_push.buffers = {{arena.range(0, 1024)}, {arena.range(1024, 1024)}};
  wrong_push.set_push_constants(uint32_t{1});
  EXPECT_THROW(rec.dispatch(wrong_push), Error);

  Dispatch too_many_groups = wrong_push;
  too_many_groups.set_push_constants(StepParams{1, 1});
  too_many_groups.groups = {device().capabilities().compute.max_workgroup_count[0] + 1u, 1, 1};
  EXPECT_THROW(rec.dispatch(too_many_groups), Error);

  KernelInterface huge = k;
  huge.workgroup_size = {device().capabilities().compute.max_workgroup_invocations + 1, 1, 1};
  EXPECT_THROW(Pipeline(device(), spirv, huge, "huge"), Error);
  KernelInterface reserved = k;
  reserved.specialization = {{1, 5}};
  EXPECT_THROW(Pipeline(device(), spirv, reserved, "reserved"), Error);

  constexpr const char* kLiteral = R"(#version 450
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer B { uint b[]; };
void main() { b[gl_GlobalInvocationID.x] = 1u; }
)";
  // SPIR-V 1.5 and 1.6 state the size differently (LocalSize / LocalSizeId).
  for (auto target : {codegen::TargetEnv::vulkan_1_2, codegen::TargetEnv::vulkan_1_3}) {
    if (target == codegen::TargetEnv::vulkan_1_3 &&
        device().capabilities().api_version < VK_API_VERSION_1_3) {
      continue;
    }
    codegen::CompileOptions options;
    options.target = target;
    const auto literal_spirv = codegen::compile_glsl(kLiteral, options);
    KernelInterface literal;
    literal.buffer_count = 1;
    literal.workgroup_size = {64, 1, 1};
    EXPECT_THROW(Pipeline(device(), literal_spirv, literal, "literal"), Error);
    literal.workgroup_size = {32, 1, 1};
    EXPECT_NO_THROW(Pipeline(device(), literal_spirv, literal, "literal"));
    // Sizes from specialization constants follow the interface.
    KernelInterface any = k;
    any.workgroup_size = {16, 2, 1};
    EXPECT_NO_THROW(Pipeline(device(), codegen::compile_glsl(kStep, options), any, "step"));
  }
  EXPECT_THROW(Pipeline(device(), std::vector<uint32_t>{1, 2, 3, 4, 5, 6}, k, "garbage"), Error);
}

}  // namespace
}  // namespace mn::vk
