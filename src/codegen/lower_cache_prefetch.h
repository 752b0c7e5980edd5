#pragma once
// The kernel of a cache prefetch (plan/cache_prefetch.h): it reads every 32-byte sector of the
// buffers it binds, so that the GPU's cache holds them when the next barrier window's kernels
// read them, and keeps nothing (kernels/cache_prefetch.comp).
#include <cstdint>
#include <span>

#include "codegen/kernel.h"

namespace mn::codegen {

// The bytes of the buffer a prefetch writes, where no value is ever kept.
inline constexpr uint64_t kCachePrefetchSinkBytes = 256;

// Binding i reads buffer i (of bytes[i] bytes, at least 4); the last binding, ArgRef::scratch(0),
// is the sink. The grid gives each invocation a few sectors, so that their loads are in flight
// together.
KernelLaunch cache_prefetch_kernel(std::span<const uint64_t> bytes, const DeviceTraits& d);

}  // namespace mn::codegen
