#pragma once
// Vulkan memory seen by CUDA: each exportable arena chunk imported once (its file descriptor
// handed to cuImportExternalMemory) and mapped whole, released when the chunk is destroyed or
// with this object, whichever comes first.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "distributed/cuda_library.h"

namespace mn::vk {
class Buffer;
}

namespace mn::dist {

class CudaImports {
 public:
  // `device_uuid`: the CUDA device of `context`, which a chunk's Vulkan device must be.
  CudaImports(const CudaLibrary& cuda, CuContext context, std::array<uint8_t, 16> device_uuid);
  ~CudaImports();
  CudaImports(const CudaImports&) = delete;
  CudaImports& operator=(const CudaImports&) = delete;

  // The chunk's first byte as a CUDA pointer, imported on first use. mn::DistributedError when
  // the chunk is not exportable, lives on another device, or CUDA refuses it.
  CuDevicePtr pointer(const vk::Buffer& chunk);
  size_t count() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
  std::array<uint8_t, 16> uuid_;
};

std::string uuid_text(const std::array<uint8_t, 16>& uuid);

}  // namespace mn::dist
