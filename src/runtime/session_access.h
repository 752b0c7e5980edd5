#pragma once
// What the library's own parts reach inside a Session: where a tensor lives in the arena, for
// engines that work on device memory in place (the NCCL engine's all-reduce of gradients).
#include <cstdint>
#include <string_view>
#include <vector>

#include <meganeura/session.h>

namespace mn {

namespace vk {
class Buffer;
class Device;
}  // namespace vk

// A tensor's bytes within one chunk of the arena.
struct ArenaSpan {
  const vk::Buffer* chunk = nullptr;
  uint64_t offset = 0;  // within the chunk
  uint64_t bytes = 0;
};

struct SessionAccess {
  // The arena bytes of a parameter or state, chunk by chunk, once any submitted step has
  // finished (so that another API may read and write them until the next step). mn::Error for a
  // name that is neither.
  static std::vector<ArenaSpan> arena_spans(Session& s, std::string_view name);
  static const vk::Device& device(const Session& s);
};

}  // namespace mn
