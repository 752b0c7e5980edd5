#include "vulkan/live_objects.h"

#include <mutex>

namespace mn::vk {

namespace {

std::mutex& live_mutex() {
  static std::mutex m;
  return m;
}

LiveObjects& live() {
  static LiveObjects counts;
  return counts;
}

int64_t& created_pipelines() {
  static int64_t n = 0;
  return n;
}

}  // namespace

std::string LiveObjects::str() const {
  return std::to_string(buffers) + " buffers (" + std::to_string(memory_bytes) + " bytes), " +
         std::to_string(pipelines) + " pipelines, " + std::to_string(recordings) + " recordings, " +
         std::to_string(descriptor_pools) + " descriptor pools, " + std::to_string(query_pools) +
         " query pools";
}

LiveObjects live_objects() {
  std::lock_guard lock(live_mutex());
  return live();
}

int64_t pipelines_created() {
  std::lock_guard lock(live_mutex());
  return created_pipelines();
}

void count_live(int64_t LiveObjects::*field, int64_t delta) {
  std::lock_guard lock(live_mutex());
  live().*field += delta;
  if (field == &LiveObjects::pipelines && delta > 0) created_pipelines() += delta;
}

}  // namespace mn::vk
