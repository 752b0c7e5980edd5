#include "distributed/cuda_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <meganeura/error.h>

namespace mn::dist {

namespace {

template <typename F>
void bind(void* lib, const std::string& file, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) {
    throw Error("the CUDA driver library '" + file + "' has no symbol " + name +
                " (a driver older than CUDA 11?)");
  }
}

CudaLibrary load() {
  const char* env = std::getenv("MN_CUDA_LIBRARY");
  const std::string file = env && *env ? env : "libcuda.so.1";
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw Error("the NCCL engine needs the CUDA driver library '" + file +
                "', which cannot be loaded (" + (why ? why : "?") +
                "): it comes with NVIDIA's driver; elsewhere use the MPI engine (mpi)");
  }
  CudaLibrary c;
  bind(lib, file, "cuInit", c.Init);
  bind(lib, file, "cuDeviceGetCount", c.DeviceGetCount);
  bind(lib, file, "cuDeviceGet", c.DeviceGet);
  bind(lib, file, "cuDeviceGetUuid", c.DeviceGetUuid);
  bind(lib, file, "cuDevicePrimaryCtxRetain", c.DevicePrimaryCtxRetain);
  bind(lib, file, "cuDevicePrimaryCtxRelease_v2", c.DevicePrimaryCtxRelease);
  bind(lib, file, "cuCtxSetCurrent", c.CtxSetCurrent);
  bind(lib, file, "cuStreamCreate", c.StreamCreate);
  bind(lib, file, "cuStreamDestroy_v2", c.StreamDestroy);
  bind(lib, file, "cuStreamQuery", c.StreamQuery);
  bind(lib, file, "cuMemAlloc_v2", c.MemAlloc);
  bind(lib, file, "cuMemFree_v2", c.MemFree);
  bind(lib, file, "cuMemcpyHtoD_v2", c.MemcpyHtoD);
  bind(lib, file, "cuMemcpyDtoH_v2", c.MemcpyDtoH);
  bind(lib, file, "cuImportExternalMemory", c.ImportExternalMemory);
  bind(lib, file, "cuExternalMemoryGetMappedBuffer", c.ExternalMemoryGetMappedBuffer);
  bind(lib, file, "cuDestroyExternalMemory", c.DestroyExternalMemory);
  bind(lib, file, "cuGetErrorString", c.GetErrorString);
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

const CudaLibrary& cuda_library() {
  static std::once_flag once;
  static CudaLibrary lib;
  static std::string failure;
  std::call_once(once, [] {
    try {
      lib = load();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
  return lib;
}

}  // namespace mn::dist
