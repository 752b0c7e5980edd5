#include "vulkan/recording.h"

#include <chrono>

#include <algorithm>

#include <meganeura/error.h>

#include "vulkan/check.h"
#include "vulkan/device.h"
#include "vulkan/fence_spin.h"
#include "vulkan/live_objects.h"
#include "vulkan/pipeline.h"

namespace mn::vk {
namespace {

constexpr VkPipelineStageFlags kWorkStages =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

VkPipelineStageFlags stage_of(bool dispatch) {
  return dispatch ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : VK_PIPELINE_STAGE_TRANSFER_BIT;
}

// Everything a stage may read or write, for the destination side of a barrier.
VkAccessFlags accesses_of(VkPipelineStageFlags stages) {
  VkAccessFlags flags = 0;
  if (stages & VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT) {
    flags |= VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  }
  if (stages & VK_PIPELINE_STAGE_TRANSFER_BIT) {
    flags |= VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  }
  return flags;
}

// One global memory barrier: cheaper to record than per-buffer barriers and, on current
// drivers, executed the same way.
void memory_barrier(VkCommandBuffer cmd, VkPipelineStageFlags src_stages, VkAccessFlags src,
                    VkPipelineStageFlags dst_stages, VkAccessFlags dst) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = src;
  barrier.dstAccessMask = dst;
  vkCmdPipelineBarrier(cmd, src_stages, dst_stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

std::string bytes_text(uint64_t offset, uint64_t size) {
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) + ")";
}

void check_range(const Range& r, const char* what) {
  if (!r.arena) throw Error(std::string(what) + ": the range has no arena");
  if (r.size == 0 || r.offset > r.arena->size() || r.size > r.arena->size() - r.offset) {
    throw Error(std::string(what) + ": arena " + bytes_text(r.offset, r.size) +
                " exceed the arena's " + std::to_string(r.arena->size()) + " bytes");
  }
}

void check_buffer_range(const Buffer& b, uint64_t offset, uint64_t size, const char* what) {
  if (offset > b.size() || size > b.size() - offset) {
    throw Error(std::string(what) + ": buffer " + bytes_text(offset, size) + " exceed its " +
                std::to_string(b.size()) + " bytes");
  }
}

MemoryAccess arena_access(const Range& r, bool write) {
  return {r.arena->id(), r.offset, r.end(), write};
}

}  // namespace

Recording::Recording(Device& device, RecordingOptions options)
    : device_(device), options_(std::move(options)) {
  if ((options_.timestamps || options_.total_time) && !device.capabilities().timestamps.supported) {
    throw DeviceError("recording '" + options_.label +
                      "': the device's compute queue has no timestamps");
  }
  const Device::CommandSlot slot = device.acquire_command_slot();
  pool_ = slot.pool;
  cmd_ = slot.buffer;
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  const VkResult result = vkCreateFence(device.handle(), &fence_info, nullptr, &fence_);
  if (result != VK_SUCCESS) {
    device.release_command_slot(slot);
    check(result, "vkCreateFence");
  }
  count_live(&LiveObjects::recordings, 1);
}

Recording::~Recording() {
  const VkDevice dev = device_.handle();
  if (pending_) vkWaitForFences(dev, 1, &fence_, VK_TRUE, UINT64_MAX);
  vkDestroyFence(dev, fence_, nullptr);
  vkDestroyQueryPool(dev, query_pool_, nullptr);
  vkDestroyDescriptorPool(dev, descriptor_pool_, nullptr);
  device_.release_command_slot({pool_, cmd_});  // recorded again by a later recording
  count_live(&LiveObjects::recordings, -1);
  if (descriptor_pool_ != VK_NULL_HANDLE) count_live(&LiveObjects::descriptor_pools, -1);
  if (query_pool_ != VK_NULL_HANDLE) count_live(&LiveObjects::query_pools, -1);
}

void Recording::add(Op op) {
  if (finished_) {
    throw Error("recording '" + options_.label + "' is finished; operation '" + op.label +
                "' cannot be added");
  }
  ops_.push_back(std::move(op));
}

void Recording::dispatch(Dispatch d) {
  if (!d.pipeline) throw Error("dispatch '" + d.label + "' has no pipeline");
  const Pipeline& p = *d.pipeline;
  const KernelInterface& k = p.interface();
  if (d.label.empty()) d.label = p.name();
  const std::string where = "dispatch '" + d.label + "'";
  if (d.buffers.size() != k.buffer_count) {
    throw Error(where + ": " + std::to_string(d.buffers.size()) +
                " buffers bound, the kernel has " + std::to_string(k.buffer_count) + " bindings");
  }
  if (d.push_constants.size() != k.push_constant_bytes) {
    throw Error(where + ": " + std::to_string(d.push_constants.size()) +
                " push-constant bytes, the kernel expects " +
                std::to_string(k.push_constant_bytes));
  }
  const auto& max_groups = device_.capabilities().compute.max_workgroup_count;
  for (int i = 0; i < 3; ++i) {
    if (d.groups[i] > max_groups[i]) {
      throw Error(where + ": " + std::to_string(d.groups[i]) + " workgroups along axis " +
                  std::to_string(i) + ", the device allows " + std::to_string(max_groups[i]));
    }
  }
  Op op;
  op.kind = Op::Kind::dispatch;
  op.label = d.label;
  for (uint32_t b = 0; b < d.buffers.size(); ++b) {
    const BufferBinding& binding = d.buffers[b];
    const std::string name = where + " binding " + std::to_string(b);
    check_range(binding.range, name.c_str());
    const Arena& arena = *binding.range.arena;
    if (!arena.placement_ok(binding.range.offset, binding.range.size)) {
      arena.range(binding.range.offset, binding.range.size);  // throws with the reason
    }
    const uint32_t needed = arena.descriptor_count(binding.range);
    if (needed > k.array_size(b)) {
      throw Error(name + ": " + bytes_text(binding.range.offset, binding.range.size) + " span " +
                  std::to_string(needed) + " arena chunks but the binding holds " +
                  std::to_string(k.array_size(b)) + " descriptor(s)");
    }
    const bool writes = static_cast<uint8_t>(binding.access) & static_cast<uint8_t>(Access::write);
    op.accesses.push_back(arena_access(binding.range, writes));
  }
  op.dispatch = std::move(d);
  ++dispatch_count_;
  add(std::move(op));
}

void Recording::upload(const Buffer& source, uint64_t source_offset, const Range& destination) {
  check_range(destination, "upload");
  check_buffer_range(source, source_offset, destination.size, "upload");
  Op op;
  op.kind = Op::Kind::copy;
  op.label = "upload";
  for (const RangePiece& p : destination.arena->pieces(destination)) {
    op.copies.push_back({source.handle(), destination.arena->chunk(p.chunk).handle(),
                         VkBufferCopy{source_offset + p.range_offset, p.offset, p.size}});
  }
  op.accesses.push_back({source.id(), source_offset, source_offset + destination.size, false});
  op.accesses.push_back(arena_access(destination, true));
  add(std::move(op));
}

void Recording::download(const Range& source, const Buffer& destination,
                         uint64_t destination_offset) {
  check_range(source, "download");
  check_buffer_range(destination, destination_offset, source.size, "download");
  Op op;
  op.kind = Op::Kind::copy;
  op.label = "download";
  for (const RangePiece& p : source.arena->pieces(source)) {
    op.copies.push_back({source.arena->chunk(p.chunk).handle(), destination.handle(),
                         VkBufferCopy{p.offset, destination_offset + p.range_offset, p.size}});
  }
  op.accesses.push_back(arena_access(source, false));
  op.accesses.push_back(
      {destination.id(), destination_offset, destination_offset + source.size, true});
  add(std::move(op));
}

void Recording::copy(const Range& source, const Range& destination) {
  check_range(source, "copy");
  check_range(destination, "copy");
  if (source.size != destination.size) {
    throw Error("copy: source has " + std::to_string(source.size) + " bytes, destination " +
                std::to_string(destination.size));
  }
  if (source.arena == destination.arena && source.offset < destination.end() &&
      destination.offset < source.end()) {
    throw Error("copy: source and destination overlap");
  }
  Op op;
  op.kind = Op::Kind::copy;
  op.label = "copy";
  // Split at the chunk boundaries of both sides.
  uint64_t done = 0;
  while (done < source.size) {
    const auto s = source.arena->pieces(source.offset + done, source.size - done).front();
    const auto t = destination.arena->pieces(destination.offset + done, source.size - done).front();
    const uint64_t n = std::min(s.size, t.size);
    op.copies.push_back({source.arena->chunk(s.chunk).handle(),
                         destination.arena->chunk(t.chunk).handle(),
                         VkBufferCopy{s.offset, t.offset, n}});
    done += n;
  }
  op.accesses.push_back(arena_access(source, false));
  op.accesses.push_back(arena_access(destination, true));
  add(std::move(op));
}

void Recording::fill(const Range& destination, uint32_t value) {
  check_range(destination, "fill");
  if (destination.offset % 4 != 0 || destination.size % 4 != 0) {
    throw Error("fill: arena " + bytes_text(destination.offset, destination.size) +
                " must start and end on multiples of 4");
  }
  Op op;
  op.kind = Op::Kind::fill;
  op.label = "fill";
  for (const RangePiece& p : destination.arena->pieces(destination)) {
    op.fills.push_back({destination.arena->chunk(p.chunk).handle(), p.offset, p.size, value});
  }
  op.accesses.push_back(arena_access(destination, true));
  add(std::move(op));
}

void Recording::record_dispatch(VkCommandBuffer cmd, const Op& op, VkDescriptorSet set) {
  const Dispatch& d = op.dispatch;
  const Pipeline& p = *d.pipeline;
  const KernelInterface& k = p.interface();
  std::vector<VkDescriptorBufferInfo> infos;
  std::vector<VkWriteDescriptorSet> writes;
  uint32_t total = 0;
  for (uint32_t b = 0; b < k.buffer_count; ++b) total += k.array_size(b);
  infos.reserve(total);
  for (uint32_t b = 0; b < k.buffer_count; ++b) {
    const Range& r = d.buffers[b].range;
    const std::vector<RangePiece> pieces = r.arena->pieces(r);
    const size_t first = infos.size();
    for (uint32_t j = 0; j < k.array_size(b); ++j) {
      // Unused array elements repeat the last piece: valid descriptors the kernel never reads.
      const RangePiece& piece = pieces[std::min<size_t>(j, pieces.size() - 1)];
      infos.push_back({r.arena->chunk(piece.chunk).handle(), piece.offset, piece.size});
    }
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.dstBinding = b;
    w.descriptorCount = k.array_size(b);
    w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w.pBufferInfo = infos.data() + first;
    writes.push_back(w);
  }
  vkUpdateDescriptorSets(device_.handle(), static_cast<uint32_t>(writes.size()), writes.data(), 0,
                         nullptr);
  if (k.buffer_count > 0) {
    vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout(), 0, 1, &set, 0,
                            nullptr);
  }
  if (!d.push_constants.empty()) {
    vkCmdPushConstants(cmd, p.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       static_cast<uint32_t>(d.push_constants.size()), d.push_constants.data());
  }
  vkCmdDispatch(cmd, d.groups[0], d.groups[1], d.groups[2]);
}

void Recording::finish() {
  if (finished_) return;
  const VkDevice dev = device_.handle();

  // Exactly the descriptors the dispatches need, allocated once.
  std::vector<VkDescriptorSet> sets(ops_.size(), VK_NULL_HANDLE);
  uint32_t set_count = 0, descriptor_count = 0;
  for (const Op& op : ops_) {
    if (op.kind != Op::Kind::dispatch || op.dispatch.buffers.empty()) continue;
    ++set_count;
    const KernelInterface& k = op.dispatch.pipeline->interface();
    for (uint32_t b = 0; b < k.buffer_count; ++b) descriptor_count += k.array_size(b);
  }
  if (set_count > 0) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptor_count};
    VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    info.maxSets = set_count;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    check(vkCreateDescriptorPool(dev, &info, nullptr, &descriptor_pool_), "vkCreateDescriptorPool");
    count_live(&LiveObjects::descriptor_pools, 1);
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Op& op = ops_[i];
      if (op.kind != Op::Kind::dispatch || op.dispatch.buffers.empty()) continue;
      VkDescriptorSetLayout layout = op.dispatch.pipeline->set_layout();
      VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
      alloc.descriptorPool = descriptor_pool_;
      alloc.descriptorSetCount = 1;
      alloc.pSetLayouts = &layout;
      check(vkAllocateDescriptorSets(dev, &alloc, &sets[i]), "vkAllocateDescriptorSets");
    }
  }
  const bool timed = options_.timestamps || options_.total_time;
  const bool per_op = options_.timestamps;
  const uint32_t query_count = per_op ? static_cast<uint32_t>(ops_.size()) + 1 : 2;
  if (timed) {
    VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    info.queryCount = query_count;
    check(vkCreateQueryPool(dev, &info, nullptr, &query_pool_), "vkCreateQueryPool");
    count_live(&LiveObjects::query_pools, 1);
  }

  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  check(vkBeginCommandBuffer(cmd_, &begin), "vkBeginCommandBuffer");

  // Barrier masks are as narrow as the operations allow: the source side covers the stages
  // since the previous barrier (and what they wrote), the destination side every stage still
  // to come, because the hazard window is cleared after a barrier.
  std::vector<VkPipelineStageFlags> later(ops_.size() + 1, 0);
  for (size_t i = ops_.size(); i-- > 0;) {
    later[i] = later[i + 1] | stage_of(ops_[i].kind == Op::Kind::dispatch);
  }
  if (timed) vkCmdResetQueryPool(cmd_, query_pool_, 0, query_count);
  // Earlier submissions (this one's previous run, uploads, other recordings) may have written
  // what the first operations touch.
  if (!ops_.empty()) memory_barrier(cmd_, kWorkStages, kWrites, later[0], accesses_of(later[0]));
  if (timed) vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_, 0);
  HazardTracker hazards;
  VkPipeline bound = VK_NULL_HANDLE;
  barrier_count_ = 0;
  VkPipelineStageFlags window_stages = 0;
  VkAccessFlags window_writes = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op& op = ops_[i];
    const bool is_dispatch = op.kind == Op::Kind::dispatch;
    if (hazards.conflicts(op.accesses)) {
      memory_barrier(cmd_, window_stages, window_writes, later[i], accesses_of(later[i]));
      hazards.clear();
      window_stages = 0;
      window_writes = 0;
      ++barrier_count_;
    }
    hazards.add(op.accesses);
    window_stages |= stage_of(is_dispatch);
    if (std::any_of(op.accesses.begin(), op.accesses.end(),
                    [](const MemoryAccess& a) { return a.write; })) {
      window_writes |= is_dispatch ? VK_ACCESS_SHADER_WRITE_BIT : VK_ACCESS_TRANSFER_WRITE_BIT;
    }
    switch (op.kind) {
      case Op::Kind::dispatch:
        if (op.dispatch.pipeline->handle() != bound) {
          bound = op.dispatch.pipeline->handle();
          vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, bound);
        }
        record_dispatch(cmd_, op, sets[i]);
        break;
      case Op::Kind::copy:
        for (const Copy& c : op.copies)
          vkCmdCopyBuffer(cmd_, c.source, c.destination, 1, &c.region);
        break;
      case Op::Kind::fill:
        for (const Fill& f : op.fills) vkCmdFillBuffer(cmd_, f.buffer, f.offset, f.size, f.value);
        break;
    }
    if (per_op) {
      vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_,
                          static_cast<uint32_t>(i + 1));
    }
  }
  if (timed && !per_op) {
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_, 1);
  }
  // The host reads staging buffers and mapped arenas after the fence.
  memory_barrier(cmd_, kWorkStages, kWrites, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
  finished_ = true;
  device_.check_validation("recording '" + options_.label + "'");
}

void Recording::submit() {
  finish();
  if (pending_) wait();
  check(vkResetFences(device_.handle(), 1, &fence_), "vkResetFences");
  VkSubmitInfo info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd_;
  device_.submit(info, fence_, "recording '" + options_.label + "'");
  submitted_at_ = std::chrono::steady_clock::now();
  pending_ = true;
}

bool Recording::poll() {
  if (!pending_) return true;
  const VkResult result = vkGetFenceStatus(device_.handle(), fence_);
  if (result == VK_NOT_READY) return false;
  check(result, "vkGetFenceStatus");
  complete();
  return true;
}

void Recording::wait() {
  if (!pending_) return;
  using std::chrono::microseconds;
  const auto ran_for = [&] {
    return std::chrono::duration_cast<microseconds>(std::chrono::steady_clock::now() -
                                                    submitted_at_);
  };
  const FenceSpin spin{microseconds{options_.spin_wait_us}};
  const auto until = std::chrono::steady_clock::now() + poll_budget(spin, last_run_, ran_for());
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < until) {
    const VkResult result = vkGetFenceStatus(device_.handle(), fence_);
    if (result == VK_NOT_READY) continue;
    check(result, "vkGetFenceStatus");
    done = true;
  }
  if (!done) {
    check(vkWaitForFences(device_.handle(), 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  }
  last_run_ = ran_for();
  complete();
}

std::future<void> Recording::wait_async() {
  return std::async(std::launch::async, [this] { wait(); });
}

void Recording::complete() {
  pending_ = false;
  if (options_.timestamps || options_.total_time) {
    const bool per_op = options_.timestamps;
    const uint32_t count = per_op ? static_cast<uint32_t>(ops_.size()) + 1 : 2;
    std::vector<uint64_t> ticks(count);
    check(vkGetQueryPoolResults(device_.handle(), query_pool_, 0, count,
                                ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
    const auto& ts = device_.capabilities().timestamps;
    const uint64_t mask = ts.valid_bits >= 64 ? ~0ull : (1ull << ts.valid_bits) - 1;
    // Counters wrap at valid_bits; the masked difference stays right across one wrap.
    auto ms = [&](uint64_t from, uint64_t to) {
      return static_cast<double>(((to & mask) - (from & mask)) & mask) * ts.period_ns * 1e-6;
    };
    timings_.clear();
    if (per_op) {
      for (size_t i = 0; i < ops_.size(); ++i) {
        const Pipeline* pipeline = ops_[i].dispatch.pipeline;
        timings_.push_back({ops_[i].label, ms(ticks[i], ticks[i + 1]),
                            pipeline ? pipeline->statistics_line() : std::string()});
      }
    }
    total_ms_ = ms(ticks.front(), ticks.back());
  }
  device_.check_validation("execution of recording '" + options_.label + "'");
}

}  // namespace mn::vk
