#pragma once
// Engines that average tensors where they live, in a session's device memory, without copying
// them through the host (the NCCL engine). The data-parallel trainers ask a communicator for
// this first and fall back on its host collectives.
#include <span>
#include <vector>

#include <meganeura/dtype.h>

#include "runtime/session_access.h"

namespace mn::dist {

struct DeviceTensor {
  std::vector<ArenaSpan> spans;  // SessionAccess::arena_spans, of exportable memory
  DType dtype = DType::f32;
};

class DeviceAverage {
 public:
  virtual ~DeviceAverage() = default;
  // Every rank's tensors replaced by their mean over the ranks, in place. The session must
  // have no step running (arena_spans waits for it) and must not start one until this returns.
  virtual void average_in_place(std::span<const DeviceTensor> tensors) = 0;
};

}  // namespace mn::dist
