#include "distributed/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <meganeura/error.h>

namespace mn::dist {

namespace {

// ncclAvg came with 2.10 (NCCL_VERSION(2,10,0) = 21000).
constexpr int kMinVersion = 21000;

template <typename F>
void bind(void* lib, const std::string& file, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) throw Error("NCCL library '" + file + "' has no symbol " + name + " (not NCCL 2?)");
}

NcclLibrary load() {
  const char* env = std::getenv("MN_NCCL_LIBRARY");
  const std::string file = env && *env ? env : "libnccl.so.2";
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw Error("the NCCL engine needs NVIDIA's NCCL library '" + file +
                "', which cannot be loaded (" + (why ? why : "?") +
                "): install libnccl2 (NVIDIA's CUDA repository, or PyPI's nvidia-nccl-cu12 with "
                "MN_NCCL_LIBRARY set to its libnccl.so.2), or use the MPI engine (mpi)");
  }
  NcclLibrary n;
  bind(lib, file, "ncclGetVersion", n.GetVersion);
  bind(lib, file, "ncclGetUniqueId", n.GetUniqueId);
  bind(lib, file, "ncclCommInitRank", n.CommInitRank);
  bind(lib, file, "ncclCommDestroy", n.CommDestroy);
  bind(lib, file, "ncclCommAbort", n.CommAbort);
  bind(lib, file, "ncclCommGetAsyncError", n.CommGetAsyncError);
  bind(lib, file, "ncclAllReduce", n.AllReduce);
  bind(lib, file, "ncclBroadcast", n.Broadcast);
  bind(lib, file, "ncclGroupStart", n.GroupStart);
  bind(lib, file, "ncclGroupEnd", n.GroupEnd);
  bind(lib, file, "ncclGetErrorString", n.GetErrorString);
  if (n.GetVersion(&n.version) != NcclLibrary::kSuccess || n.version < kMinVersion) {
    throw Error("NCCL library '" + file + "' is version " + std::to_string(n.version) +
                ", older than the 2.10 the NCCL engine needs");
  }
  return n;
}

}  // namespace

std::string NcclLibrary::error_text(const char* call, NcclResult code) const {
  const char* text = GetErrorString ? GetErrorString(code) : nullptr;
  return std::string(call) + " failed: " + (text ? text : "NCCL error " + std::to_string(code));
}

const NcclLibrary& nccl_library() {
  static std::once_flag once;
  static NcclLibrary lib;
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
