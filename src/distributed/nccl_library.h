#pragma once
// NCCL's C library (libnccl.so.2), loaded at run time: the entry points the NCCL engine uses,
// declared here from NCCL 2's stable ABI (enums by value, the 128-byte unique id), so building
// meganeura needs neither NCCL nor CUDA.
#include <string>

#include "distributed/cuda_library.h"

namespace mn::dist {

using NcclResult = int;  // ncclResult_t; 0 is ncclSuccess
using NcclComm = void*;
struct NcclUniqueId {
  char internal[128];
};

struct NcclLibrary {
  NcclResult (*GetVersion)(int*) = nullptr;
  NcclResult (*GetUniqueId)(NcclUniqueId*) = nullptr;
  NcclResult (*CommInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  NcclResult (*CommDestroy)(NcclComm) = nullptr;
  NcclResult (*CommAbort)(NcclComm) = nullptr;
  NcclResult (*CommGetAsyncError)(NcclComm, NcclResult*) = nullptr;
  NcclResult (*AllReduce)(const void*, void*, size_t, int, int, NcclComm, CuStream) = nullptr;
  NcclResult (*Broadcast)(const void*, void*, size_t, int, int, NcclComm, CuStream) = nullptr;
  NcclResult (*GroupStart)() = nullptr;
  NcclResult (*GroupEnd)() = nullptr;
  const char* (*GetErrorString)(NcclResult) = nullptr;
  int version = 0;  // e.g. 22803 for 2.28.3

  static constexpr NcclResult kSuccess = 0;
  static constexpr NcclResult kInvalidUsage = 5;
  static constexpr NcclResult kInProgress = 7;
  static constexpr int kUint8 = 1, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8,
                       kBfloat16 = 9;  // ncclDataType_t
  static constexpr int kSum = 0, kAvg = 4;                      // ncclRedOp_t (ncclAvg: 2.10)

  std::string error_text(const char* call, NcclResult code) const;
};

// The library, loaded once per process ($MN_NCCL_LIBRARY names another file); an mn::Error
// saying what to install when it is missing, too old (before 2.10) or lacks an entry point.
const NcclLibrary& nccl_library();

}  // namespace mn::dist
