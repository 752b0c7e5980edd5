#include "distributed/cuda_imports.h"

#include <unistd.h>

#include <fmt/format.h>

#include <meganeura/distributed.h>

#include "vulkan/buffer.h"
#include "vulkan/device.h"

namespace mn::dist {

struct CudaImports::Shared {
  struct Import {
    CuExternalMemory memory = nullptr;
    CuDevicePtr pointer = 0;
  };
  Shared(const CudaLibrary& c, CuContext ctx) : cuda(c), context(ctx) {}
  const CudaLibrary& cuda;
  CuContext context;
  std::mutex mutex;
  std::map<uint64_t, Import> by_buffer;  // by vk::Buffer::id()

  // Runs in the chunk's destructor: must not throw.
  void release(uint64_t id) {
    std::lock_guard lock(mutex);
    auto it = by_buffer.find(id);
    if (it == by_buffer.end()) return;
    cuda.CtxSetCurrent(context);
    cuda.DestroyExternalMemory(it->second.memory);
    by_buffer.erase(it);
  }
};

std::string uuid_text(const std::array<uint8_t, 16>& uuid) {
  std::string s;
  for (uint8_t b : uuid) s += fmt::format("{:02x}", b);
  return s;
}

CudaImports::CudaImports(const CudaLibrary& cuda, CuContext context,
                         std::array<uint8_t, 16> device_uuid)
    : shared_(std::make_shared<Shared>(cuda, context)), uuid_(device_uuid) {}

CudaImports::~CudaImports() {
  std::lock_guard lock(shared_->mutex);
  shared_->cuda.CtxSetCurrent(shared_->context);
  for (auto& [id, imp] : shared_->by_buffer) shared_->cuda.DestroyExternalMemory(imp.memory);
  shared_->by_buffer.clear();
}

size_t CudaImports::count() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->by_buffer.size();
}

CuDevicePtr CudaImports::pointer(const vk::Buffer& chunk) {
  {
    std::lock_guard lock(shared_->mutex);
    auto it = shared_->by_buffer.find(chunk.id());
    if (it != shared_->by_buffer.end()) return it->second.pointer;
  }
  const vk::DeviceCapabilities& caps = chunk.device().capabilities();
  if (caps.device_uuid != uuid_) {
    throw DistributedError(fmt::format(
        "the session's device '{}' (UUID {}) is not the CUDA device NCCL uses in this process "
        "(UUID {}): give both the local rank's device (MN_DEVICE, CUDA_VISIBLE_DEVICES)",
        caps.name, uuid_text(caps.device_uuid), uuid_text(uuid_)));
  }
  if (!chunk.exportable()) {
    throw DistributedError(
        "the session's memory is not exportable (SessionOptions::exportable_memory)");
  }
  const CudaLibrary& cuda = shared_->cuda;
  CuExternalMemoryHandleDesc desc;
  desc.type = CudaLibrary::kHandleOpaqueFd;
  desc.handle.fd = chunk.export_fd();
  desc.size = chunk.allocation_size();
  desc.flags = CudaLibrary::kDedicated;
  Shared::Import imp;
  if (const CuResult rc = cuda.ImportExternalMemory(&imp.memory, &desc);
      rc != CudaLibrary::kSuccess) {
    close(desc.handle.fd);  // CUDA owns the descriptor only once it imported it
    throw DistributedError(cuda.error_text("cuImportExternalMemory", rc));
  }
  CuExternalMemoryBufferDesc whole;
  whole.size = chunk.allocation_size();
  if (const CuResult rc = cuda.ExternalMemoryGetMappedBuffer(&imp.pointer, imp.memory, &whole);
      rc != CudaLibrary::kSuccess) {
    cuda.DestroyExternalMemory(imp.memory);
    throw DistributedError(cuda.error_text("cuExternalMemoryGetMappedBuffer", rc));
  }
  {
    std::lock_guard lock(shared_->mutex);
    shared_->by_buffer[chunk.id()] = imp;
  }
  chunk.on_destroy([weak = std::weak_ptr<Shared>(shared_), id = chunk.id()] {
    if (auto shared = weak.lock()) shared->release(id);
  });
  return imp.pointer;
}

}  // namespace mn::dist
