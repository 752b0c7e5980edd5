#include "runtime/run_lowering.h"

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include <meganeura/error.h>

#include "codegen/index_check.h"
#include "runtime/host_tensor.h"
#include "runtime/index_check.h"
#include "vulkan/arena.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn::runtime {

std::vector<double> run_lowering(vk::Device& dev, const codegen::Lowering& lowering,
                                 std::span<const std::vector<double>> inputs,
                                 std::span<const DType> input_dtypes, int64_t output_elements,
                                 DType output_dtype, codegen::CompileOptions options) {
  if (inputs.size() != input_dtypes.size())
    throw Error("run_lowering: " + std::to_string(inputs.size()) + " operands but " +
                std::to_string(input_dtypes.size()) + " dtypes");
  const uint64_t align =
      std::max<uint64_t>(256, dev.capabilities().buffers.min_storage_buffer_offset_alignment);
  // Placement in one arena: operands, output, scratch, each aligned (empty ranges get 4 bytes).
  uint64_t end = 0;
  auto place = [&](uint64_t bytes) {
    const uint64_t at = end, size = std::max<uint64_t>(bytes, 4);
    end = (at + size + align - 1) / align * align;
    return std::pair{at, size};
  };
  std::vector<std::pair<uint64_t, uint64_t>> input_at, scratch_at, counter_at;
  for (size_t i = 0; i < inputs.size(); ++i)
    input_at.push_back(place(inputs[i].size() * dtype_size(input_dtypes[i])));
  const uint64_t output_bytes = static_cast<uint64_t>(output_elements) * dtype_size(output_dtype);
  const auto output_at = place(output_bytes);
  for (uint64_t bytes : lowering.scratch_bytes) scratch_at.push_back(place(bytes));
  for (uint64_t bytes : lowering.counter_bytes) counter_at.push_back(place(bytes));
  const auto slot_at = place(codegen::kIndexSlotBytes);

  vk::Arena arena(dev, end);
  arena.write(slot_at.first, std::array<std::byte, codegen::kIndexSlotBytes>{});
  for (const auto& [at, bytes] : counter_at) arena.write(at, std::vector<std::byte>(bytes));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::byte> bytes(inputs[i].size() * dtype_size(input_dtypes[i]));
    encode(std::span<const double>(inputs[i]), input_dtypes[i], bytes);
    arena.write(input_at[i].first, bytes);
  }

  std::vector<std::unique_ptr<vk::Pipeline>> pipelines;
  vk::Recording rec(dev, {false, "run_lowering"});
  for (const codegen::KernelLaunch& k : lowering.launches) {
    options.name = k.name;
    codegen::CompileOptions ko = options;
    ko.coop_khr = (options.coop_khr || k.coop_khr) && !k.current_compiler;
    if (k.current_compiler) ko.compiler = codegen::GlslCompiler::current;
    vk::KernelInterface ki;
    ki.buffer_count = static_cast<uint32_t>(k.bindings.size());
    ki.workgroup_size = k.workgroup;
    pipelines.push_back(
        std::make_unique<vk::Pipeline>(dev, codegen::compile_glsl(k.glsl, ko), ki, k.name));
    vk::Dispatch d;
    d.pipeline = pipelines.back().get();
    for (const codegen::KernelBinding& b : k.bindings) {
      std::pair<uint64_t, uint64_t> at;
      switch (b.arg.kind) {
        case codegen::ArgRef::Kind::input:
          at = input_at.at(static_cast<size_t>(b.arg.index));
          break;
        case codegen::ArgRef::Kind::output:
          if (b.arg.index != 0)
            throw Error("run_lowering: kernel '" + k.name + "' writes output " +
                        std::to_string(b.arg.index) + "; only single-output lowerings run alone");
          at = output_at;
          break;
        case codegen::ArgRef::Kind::scratch:
          at = scratch_at.at(static_cast<size_t>(b.arg.index));
          break;
        case codegen::ArgRef::Kind::counters:
          at = counter_at.at(static_cast<size_t>(b.arg.index));
          break;
        case codegen::ArgRef::Kind::index_errors:
          if (!lowering.index_check)
            throw Error("run_lowering: kernel '" + k.name +
                        "' binds an index slot without a check");
          at = slot_at;
          break;
      }
      d.buffers.push_back({arena.range(at.first, at.second),
                           b.written ? vk::Access::read_write : vk::Access::read});
    }
    d.groups = k.groups;
    d.label = k.name;
    rec.dispatch(std::move(d));
  }
  rec.run();
  dev.check_validation("run_lowering");
  std::array<uint32_t, 4> slot{};
  arena.read(slot_at.first, std::as_writable_bytes(std::span(slot)));
  if (slot[0] != 0) {
    throw IndexError(
        "run_lowering: " + lowering.launches.front().name + ": " +
        describe_bad_index(*lowering.index_check, slot[1], static_cast<int32_t>(slot[2])));
  }
  // Counters must be zero again after every run (codegen::Lowering::counter_bytes): a session
  // runs the same kernels next step on the words they leave.
  for (const auto& [at, count_bytes] : counter_at) {
    std::vector<uint32_t> words(count_bytes / sizeof(uint32_t));
    arena.read(at, std::as_writable_bytes(std::span(words)));
    for (size_t w = 0; w < words.size(); ++w) {
      if (words[w] != 0) {
        throw Error("run_lowering: " + lowering.launches.back().name + " left counter word " +
                    std::to_string(w) + " at " + std::to_string(words[w]) + ", not zero");
      }
    }
  }
  std::vector<std::byte> bytes(output_bytes);
  arena.read(output_at.first, bytes);
  return decode(bytes, output_dtype, static_cast<size_t>(output_elements));
}

}  // namespace mn::runtime
