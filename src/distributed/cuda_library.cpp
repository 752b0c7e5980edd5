#include "distributed/cuda_library.h"

#include "distributed/runtime_library.h"

namespace mn::dist {

namespace {

template <typename F>
void bind(const OpenedLibrary& lib, const char* name, F& fn) {
  dist::bind(lib, name, fn, "the CUDA driver library", "a driver older than CUDA 11?");
}

CudaLibrary load() {
  const OpenedLibrary lib = open_library("MN_CUDA_LIBRARY", "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    throw Error("the NCCL engine needs the CUDA driver library '" + lib.file +
                "', which cannot be loaded (" + lib.missing_why +
                "): it comes with NVIDIA's driver; elsewhere use the MPI engine (mpi)");
  }
  CudaLibrary c;
  bind(lib, "cuInit", c.Init);
  bind(lib, "cuDeviceGetCount", c.DeviceGetCount);
  bind(lib, "cuDeviceGet", c.DeviceGet);
  bind(lib, "cuDeviceGetUuid", c.DeviceGetUuid);
  bind(lib, "cuDevicePrimaryCtxRetain", c.DevicePrimaryCtxRetain);
  bind(lib, "cuDevicePrimaryCtxRelease_v2", c.DevicePrimaryCtxRelease);
  bind(lib, "cuCtxSetCurrent", c.CtxSetCurrent);
  bind(lib, "cuCtxSynchronize", c.CtxSynchronize);
  bind(lib, "cuStreamCreate", c.StreamCreate);
  bind(lib, "cuStreamDestroy_v2", c.StreamDestroy);
  bind(lib, "cuStreamQuery", c.StreamQuery);
  bind(lib, "cuMemAlloc_v2", c.MemAlloc);
  bind(lib, "cuMemFree_v2", c.MemFree);
  bind(lib, "cuMemcpyHtoD_v2", c.MemcpyHtoD);
  bind(lib, "cuMemcpyHtoDAsync_v2", c.MemcpyHtoDAsync);
  bind(lib, "cuMemcpyDtoH_v2", c.MemcpyDtoH);
  bind(lib, "cuImportExternalMemory", c.ImportExternalMemory);
  bind(lib, "cuExternalMemoryGetMappedBuffer", c.ExternalMemoryGetMappedBuffer);
  bind(lib, "cuDestroyExternalMemory", c.DestroyExternalMemory);
  bind(lib, "cuGetErrorString", c.GetErrorString);
  const CuResult rc = c.Init(0);
  if (rc != CudaLibrary::kSuccess) throw Error(c.error_text("cuInit", rc));
  return c;
}

}  // namespace

std::string CudaLibrary::error_text(const char* call, CuResult code) const {
  const char* text = nullptr;
  if (GetErrorString && GetErrorString(code, &text) == kSuccess && text) {
    return std::string(call) + " failed: " + text;
  }
  return std::string(call) + " failed with CUDA error " + std::to_string(code);
}

const CudaLibrary& cuda_library() { return load_once<CudaLibrary>(load); }

}  // namespace mn::dist
