#pragma once
// The CUDA driver's C library (libcuda.so.1, installed with every NVIDIA driver), loaded at run
// time for the NCCL engine: its context and stream, staging memory for host collectives, and
// the import of Vulkan memory. Declared here from the driver API's stable ABI (the _v2 entry
// points), so the core needs no CUDA headers and no CUDA library to build or link.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mn::dist {

using CuResult = int;  // CUresult; 0 is CUDA_SUCCESS
using CuDevice = int;
using CuContext = void*;
using CuStream = void*;  // the same handle as the runtime's cudaStream_t, which NCCL takes
using CuExternalMemory = void*;
using CuDevicePtr = unsigned long long;

struct CuExternalMemoryHandleDesc {  // CUDA_EXTERNAL_MEMORY_HANDLE_DESC
  int type = 0;                      // CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD = 1
  union {
    int fd;
    struct {
      void* handle;
      const void* name;
    } win32;
    const void* nv_sci_buf_object;
  } handle{};
  unsigned long long size = 0;
  unsigned int flags = 0;  // CUDA_EXTERNAL_MEMORY_DEDICATED = 1
  unsigned int reserved[16] = {};
};

struct CuExternalMemoryBufferDesc {  // CUDA_EXTERNAL_MEMORY_BUFFER_DESC
  unsigned long long offset = 0;
  unsigned long long size = 0;
  unsigned int flags = 0;
  unsigned int reserved[16] = {};
};

struct CudaLibrary {
  CuResult (*Init)(unsigned int) = nullptr;
  CuResult (*DeviceGetCount)(int*) = nullptr;
  CuResult (*DeviceGet)(CuDevice*, int) = nullptr;
  CuResult (*DeviceGetUuid)(std::array<uint8_t, 16>*, CuDevice) = nullptr;
  CuResult (*DevicePrimaryCtxRetain)(CuContext*, CuDevice) = nullptr;
  CuResult (*DevicePrimaryCtxRelease)(CuDevice) = nullptr;
  CuResult (*CtxSetCurrent)(CuContext) = nullptr;
  CuResult (*CtxSynchronize)() = nullptr;
  CuResult (*StreamCreate)(CuStream*, unsigned int) = nullptr;
  CuResult (*StreamDestroy)(CuStream) = nullptr;
  CuResult (*StreamQuery)(CuStream) = nullptr;
  CuResult (*MemAlloc)(CuDevicePtr*, size_t) = nullptr;
  CuResult (*MemFree)(CuDevicePtr) = nullptr;
  CuResult (*MemcpyHtoD)(CuDevicePtr, const void*, size_t) = nullptr;
  // On a stream: what NCCL then runs on the same stream sees the bytes (the synchronous copy
  // from pageable memory may return before its DMA lands, and orders nothing on another stream).
  CuResult (*MemcpyHtoDAsync)(CuDevicePtr, const void*, size_t, CuStream) = nullptr;
  CuResult (*MemcpyDtoH)(void*, CuDevicePtr, size_t) = nullptr;
  CuResult (*ImportExternalMemory)(CuExternalMemory*, const CuExternalMemoryHandleDesc*) = nullptr;
  CuResult (*ExternalMemoryGetMappedBuffer)(CuDevicePtr*, CuExternalMemory,
                                            const CuExternalMemoryBufferDesc*) = nullptr;
  CuResult (*DestroyExternalMemory)(CuExternalMemory) = nullptr;
  CuResult (*GetErrorString)(CuResult, const char**) = nullptr;

  static constexpr CuResult kSuccess = 0;
  static constexpr CuResult kNotReady = 600;  // CUDA_ERROR_NOT_READY
  static constexpr unsigned int kStreamNonBlocking = 1;
  static constexpr int kHandleOpaqueFd = 1;
  static constexpr unsigned int kDedicated = 1;

  // "cuMemAlloc failed: out of memory" for a code other than CUDA_SUCCESS.
  std::string error_text(const char* call, CuResult code) const;
};

// The driver library, loaded and initialised (cuInit) once per process ($MN_CUDA_LIBRARY names
// another file); an mn::Error saying what is missing when it cannot be loaded.
const CudaLibrary& cuda_library();

}  // namespace mn::dist
