#include "codegen/lower_cache_prefetch.h"

#include <algorithm>
#include <string>

#include <meganeura/error.h>

#include "codegen/glsl.h"
#include "codegen/kernel_template.h"

namespace mn::codegen {

namespace {

constexpr uint64_t kSectorBytes = 32;
constexpr uint32_t kThreads = 256;
// Sectors an invocation reads, all loads issued together.
constexpr uint64_t kSectorsPerThread = 8;

uint64_t sectors(uint64_t bytes) { return (bytes / 4 * 4 + kSectorBytes - 1) / kSectorBytes; }

}  // namespace

KernelLaunch cache_prefetch_kernel(std::span<const uint64_t> bytes, const DeviceTraits& d) {
  if (bytes.empty()) throw Error("cache_prefetch_kernel: no buffer to read");
  uint64_t total = 0;
  for (uint64_t b : bytes) {
    if (b < 4) throw Error("cache_prefetch_kernel: a buffer of " + std::to_string(b) + " bytes");
    total += sectors(b);
  }
  const uint64_t groups =
      (total + kThreads * kSectorsPerThread - 1) / (kThreads * kSectorsPerThread);
  if (groups > d.max_group_count) {
    throw Error("cache_prefetch_kernel: " + std::to_string(total * kSectorBytes) +
                " bytes need more workgroups than the device allows");
  }
  const uint64_t threads = groups * kThreads;
  std::string buffers, loads;
  KernelLaunch k;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const std::string n = std::to_string(i);
    buffers +=
        "layout(set = 0, binding = " + n + ") readonly buffer B" + n + " { uint b" + n + "[]; };\n";
    const uint64_t s = sectors(bytes[i]);
    const uint64_t per = (s + threads - 1) / threads;
    loads += "  for (uint j = 0u; j < " + glsl::ulit(static_cast<int64_t>(per)) +
             "; ++j) {\n    const uint s = t + j * threads;\n    if (s < " +
             glsl::ulit(static_cast<int64_t>(s)) + ") acc ^= b" + n + "[s * kSectorWords];\n  }\n";
    k.bindings.push_back({ArgRef::input(static_cast<int>(i)), false});
  }
  k.bindings.push_back({ArgRef::scratch(0), true});
  k.name = "cache_prefetch";
  k.glsl = fill_kernel_template("cache_prefetch.comp",
                                {{"BUFFERS", buffers},
                                 {"LOADS", loads},
                                 {"SINK_BINDING", std::to_string(bytes.size())},
                                 {"SINK_WORDS", std::to_string(kCachePrefetchSinkBytes / 4)}});
  k.workgroup = {kThreads, 1, 1};
  k.groups = {static_cast<uint32_t>(groups), 1, 1};
  return k;
}

}  // namespace mn::codegen
