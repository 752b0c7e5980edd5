#pragma once
// The Vulkan objects this process holds now, counted by the classes that create and destroy
// them: a leak is a count that grows while sessions come and go (tests/runtime/soak_test.cpp).
// The instance, devices, pipeline caches and the command pools a device recycles for its
// recordings live as long as the process and are not counted; one-off fences
// (Device::run_commands) never outlive their call.
#include <cstdint>
#include <string>

namespace mn::vk {

struct LiveObjects {
  int64_t buffers = 0;           // VkBuffer, each with its own VkDeviceMemory (Buffer)
  int64_t memory_bytes = 0;      // the sizes of those allocations
  int64_t pipelines = 0;         // VkPipeline with its layouts and shader module (Pipeline)
  int64_t recordings = 0;        // a VkFence, and a command pool taken from the device
  int64_t descriptor_pools = 0;  // a recording's descriptor sets
  int64_t query_pools = 0;       // a recording's timestamps
  bool operator==(const LiveObjects&) const = default;
  std::string str() const;  // "3 buffers (1024 bytes), 2 pipelines, ..."
};

LiveObjects live_objects();
// Pipelines created since the process started (alive or not).
int64_t pipelines_created();

// Called by the creating class after creation succeeded (+1) and when it destroys (-1).
void count_live(int64_t LiveObjects::*field, int64_t delta);

}  // namespace mn::vk
