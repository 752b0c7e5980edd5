#include "distributed/nccl_library.h"

#include "distributed/runtime_library.h"

namespace mn::dist {

namespace {

// ncclAvg came with 2.10 (NCCL_VERSION(2,10,0) = 21000).
constexpr int kMinVersion = 21000;

template <typename F>
void bind(const OpenedLibrary& lib, const char* name, F& fn) {
  dist::bind(lib, name, fn, "NCCL library", "not NCCL 2?");
}

NcclLibrary load() {
  const OpenedLibrary lib = open_library("MN_NCCL_LIBRARY", "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    throw Error("the NCCL engine needs NVIDIA's NCCL library '" + lib.file +
                "', which cannot be loaded (" + lib.missing_why +
                "): install libnccl2 (NVIDIA's CUDA repository, or PyPI's nvidia-nccl-cu12 with "
                "MN_NCCL_LIBRARY set to its libnccl.so.2), or use the MPI engine (mpi)");
  }
  NcclLibrary n;
  bind(lib, "ncclGetVersion", n.GetVersion);
  bind(lib, "ncclGetUniqueId", n.GetUniqueId);
  bind(lib, "ncclCommInitRank", n.CommInitRank);
  bind(lib, "ncclCommDestroy", n.CommDestroy);
  bind(lib, "ncclCommAbort", n.CommAbort);
  bind(lib, "ncclCommGetAsyncError", n.CommGetAsyncError);
  bind(lib, "ncclAllReduce", n.AllReduce);
  bind(lib, "ncclBroadcast", n.Broadcast);
  bind(lib, "ncclGroupStart", n.GroupStart);
  bind(lib, "ncclGroupEnd", n.GroupEnd);
  bind(lib, "ncclGetErrorString", n.GetErrorString);
  if (n.GetVersion(&n.version) != NcclLibrary::kSuccess || n.version < kMinVersion) {
    throw Error("NCCL library '" + lib.file + "' is version " + std::to_string(n.version) +
                ", older than the 2.10 the NCCL engine needs");
  }
  return n;
}

}  // namespace

std::string NcclLibrary::error_text(const char* call, NcclResult code) const {
  const char* text = GetErrorString ? GetErrorString(code) : nullptr;
  return std::string(call) + " failed: " + (text ? text : "NCCL error " + std::to_string(code));
}

const NcclLibrary& nccl_library() { return load_once<NcclLibrary>(load); }

}  // namespace mn::dist
