#include "runtime/index_check.h"

#include <meganeura/error.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "codegen/index_check.h"
#include "runtime/node_description.h"

namespace mn::runtime {

namespace {

// A slot as the kernels write it: {claimed, element, value, unused}.
using Slot = std::array<uint32_t, 4>;

void zero_slots(vk::Arena& arena, const plan::StepPlan& plan) {
  const std::array<std::byte, codegen::kIndexSlotBytes> zeros{};
  for (const plan::IndexCheckSlot& s : plan.index_checks) {
    arena.write(plan.buffers[static_cast<size_t>(s.buffer)].offset, zeros);
  }
}

}  // namespace

bool check_indices_from_env() {
  const char* v = std::getenv("MN_CHECK_INDICES");
  return !(v && std::strcmp(v, "0") == 0);
}

std::string describe_bad_index(const codegen::IndexCheck& check, uint32_t element, int32_t value,
                               const std::string& source) {
  return check.noun + " " + std::to_string(value) + " at element " + std::to_string(element) +
         " of the " + check.operand + (source.empty() ? "" : " (" + source + ")") +
         " is out of range [0, " + std::to_string(check.bound) + ")" + check.context;
}

IndexSlots::IndexSlots(vk::Device& device, vk::Arena& arena, const plan::StepPlan& plan)
    : arena_(arena) {
  if (plan.index_checks.empty()) return;
  zero_slots(arena_, plan);
  if (!arena_.host_mapped()) {
    staging_ = std::make_unique<vk::StagingBuffer>(
        device, plan.index_checks.size() * codegen::kIndexSlotBytes, true);
  }
}

void IndexSlots::record_downloads(vk::Recording& recording, const plan::StepPlan& plan) const {
  if (!staging_) return;
  for (size_t i = 0; i < plan.index_checks.size(); ++i) {
    const plan::PlannedBuffer& b = plan.buffers[static_cast<size_t>(plan.index_checks[i].buffer)];
    recording.download(arena_.range(b.offset, codegen::kIndexSlotBytes), *staging_,
                       i * codegen::kIndexSlotBytes);
  }
}

void IndexSlots::check(const plan::StepPlan& plan, const std::string& program) {
  for (size_t i = 0; i < plan.index_checks.size(); ++i) {
    const plan::IndexCheckSlot& s = plan.index_checks[i];
    Slot slot{};
    const auto bytes = std::as_writable_bytes(std::span(slot));
    if (staging_) {
      staging_->read(i * codegen::kIndexSlotBytes, bytes);
    } else {
      arena_.read(plan.buffers[static_cast<size_t>(s.buffer)].offset, bytes);
    }
    if (slot[0] == 0) continue;
    zero_slots(arena_, plan);
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
