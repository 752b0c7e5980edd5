#include "runtime/index_check.h"

#include <meganeura/error.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codegen/index_check.h"
#include "runtime/node_description.h"
#include "support/env_switch.h"

namespace mn::runtime {

namespace {

// A slot as the kernels write it: {claimed, element, value, unused}.
using Slot = std::array<uint32_t, 4>;

uint64_t region_bytes(const plan::StepPlan& plan) {
  return plan.index_checks.size() * plan.index_region.stride;
}

void zero_region(vk::Arena& arena, const plan::StepPlan& plan) {
  const std::vector<std::byte> zeros(region_bytes(plan));
  arena.write(plan.buffers[static_cast<size_t>(plan.index_region.buffer)].offset, zeros);
}

}  // namespace

bool check_indices_from_env() { return support::env_switch("MN_CHECK_INDICES", true); }

std::string describe_bad_index(const codegen::IndexCheck& check, uint32_t element, int32_t value,
                               const std::string& source) {
  return check.noun + " " + std::to_string(value) + " at element " + std::to_string(element) +
         " of the " + check.operand + (source.empty() ? "" : " (" + source + ")") +
         " is out of range [0, " + std::to_string(check.bound) + ")" + check.context;
}

IndexSlots::IndexSlots(vk::Device& device, vk::Arena& arena, const plan::StepPlan& plan)
    : arena_(arena), bytes_(region_bytes(plan)) {
  if (plan.index_checks.empty()) return;
  zero_region(arena_, plan);
  // Host-cached staging even where the host maps the arena: reads through that mapping are
  // uncached (a few hundred bytes cost ~0.08 ms a step on the H200, more than the copy).
  staging_ = std::make_unique<vk::StagingBuffer>(device, bytes_, true);
}

void IndexSlots::record_downloads(vk::Recording& recording, const plan::StepPlan& plan) const {
  if (!staging_) return;
  const plan::PlannedBuffer& region = plan.buffers[static_cast<size_t>(plan.index_region.buffer)];
  recording.download(arena_.range(region.offset, bytes_), *staging_, 0);
}

void IndexSlots::check(const plan::StepPlan& plan, const std::string& program) {
  if (!staging_) return;
  // Every slot in one read of the step's copy.
  std::vector<std::byte> bytes(bytes_);
  staging_->read(0, bytes);
  for (size_t i = 0; i < plan.index_checks.size(); ++i) {
    Slot slot{};
    std::memcpy(slot.data(), bytes.data() + i * plan.index_region.stride, sizeof(Slot));
    if (slot[0] == 0) continue;
    zero_region(arena_, plan);
    const plan::IndexCheckSlot& s = plan.index_checks[i];
    const Node& node = plan.graph.node(s.node);
    const NodeId source = node.inputs.at(static_cast<size_t>(s.check.input));
    throw IndexError("program '" + program + "': " + std::string(node.op_name()) + ": " +
                     describe_bad_index(s.check, slot[1], static_cast<int32_t>(slot[2]),
                                        describe_operand(plan, source)) +
                     "; met on the device by " + describe_node(plan, s.node) +
                     ", which read and wrote nothing outside its tensors");
  }
}

}  // namespace mn::runtime
