#include "distributed/nccl_communicator.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "distributed/cuda_imports.h"
#include "distributed/cuda_library.h"
#include "distributed/device_average.h"
#include "distributed/env_launch.h"
#include "distributed/mpi_communicator.h"
#include "distributed/nccl_library.h"
#include "distributed/poll.h"
#include "vulkan/buffer.h"
#include "vulkan/device.h"

namespace mn::dist {

namespace {

int nccl_type(DType d) {
  switch (d) {
    case DType::f32:
      return NcclLibrary::kFloat32;
    case DType::f16:
      return NcclLibrary::kFloat16;
    case DType::bf16:
      return NcclLibrary::kBfloat16;
    default:
      throw Error(std::string("the NCCL engine averages floating-point tensors, not ") +
                  dtype_name(d));
  }
}

class NcclCommunicator final : public Communicator, public DeviceAverage {
 public:
  NcclCommunicator(int rank, int size, int local_rank, const NcclUniqueId& id, double timeout,
                   std::shared_ptr<Communicator> launcher)
      : cuda_(cuda_library()),
        nccl_(nccl_library()),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        launcher_(std::move(launcher)) {
    int count = 0;
    check_cuda(cuda_.DeviceGetCount(&count), "cuDeviceGetCount");
    if (count == 0) throw DistributedError(fmt::format("rank {}: CUDA sees no device", rank_));
    device_index_ = local_rank % count;
    check_cuda(cuda_.DeviceGet(&device_, device_index_), "cuDeviceGet");
    check_cuda(cuda_.DeviceGetUuid(&uuid_, device_), "cuDeviceGetUuid");
    check_cuda(cuda_.DevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    check_cuda(cuda_.CtxSetCurrent(context_), "cuCtxSetCurrent");
    check_cuda(cuda_.StreamCreate(&stream_, CudaLibrary::kStreamNonBlocking), "cuStreamCreate");
    imports_ = std::make_unique<CudaImports>(cuda_, context_, uuid_);
    if (const NcclResult rc = nccl_.CommInitRank(&comm_, size_, id, rank_);
        rc != NcclLibrary::kSuccess) {
      // What NCCL most often refuses as invalid usage: two ranks on one GPU.
      throw DistributedError(fmt::format(
          "rank {} of {}: {}{}", rank_, size_, nccl_.error_text("ncclCommInitRank", rc),
          rc == NcclLibrary::kInvalidUsage
              ? fmt::format("; NCCL gives each rank a GPU of its own, and this rank's is CUDA "
                            "device {} (the local rank's, modulo {} devices)",
                            device_index_, count)
              : ""));
    }
  }

  ~NcclCommunicator() override {
    cuda_.CtxSetCurrent(context_);
    if (comm_) (broken_ ? nccl_.CommAbort : nccl_.CommDestroy)(comm_);
    imports_.reset();
    if (staging_) cuda_.MemFree(staging_);
    if (stream_) cuda_.StreamDestroy(stream_);
    cuda_.DevicePrimaryCtxRelease(device_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return "nccl"; }

  void all_reduce_sum(std::span<float> values) override {
    reduce_host(values.data(), values.size() * sizeof(float), values.size(),
                NcclLibrary::kFloat32, "all-reduce of floats");
  }
  void all_reduce_sum(std::span<double> values) override {
    reduce_host(values.data(), values.size() * sizeof(double), values.size(),
                NcclLibrary::kFloat64, "all-reduce of doubles");
  }

  void broadcast(std::span<std::byte> bytes, int root) override {
    if (root < 0 || root >= size_) {
      throw DistributedError(fmt::format("broadcast from rank {}: the job has ranks 0 to {}", root,
                                         size_ - 1));
    }
    if (bytes.empty()) return;
    current();
    const CuDevicePtr d = staging(bytes.size());
    check_cuda(cuda_.MemcpyHtoDAsync(d, bytes.data(), bytes.size(), stream_), "cuMemcpyHtoDAsync");
    void* p = reinterpret_cast<void*>(d);
    check_nccl(nccl_.Broadcast(p, p, bytes.size(), NcclLibrary::kUint8,
                               root, comm_, stream_),
               "ncclBroadcast");
    wait(fmt::format("broadcast of {} bytes from rank {}", bytes.size(), root));
    check_cuda(cuda_.MemcpyDtoH(bytes.data(), d, bytes.size()), "cuMemcpyDtoH");
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(nullptr);
    if (launcher_) launcher_->abort(code);  // mpirun: ends every rank
    broken_ = true;
    if (comm_) nccl_.CommAbort(comm_);
    std::_Exit(code);
  }

  void average_in_place(std::span<const DeviceTensor> tensors) override {
    current();
    size_t total = 0;
    check_nccl(nccl_.GroupStart(), "ncclGroupStart");
    try {
      for (const DeviceTensor& t : tensors) {
        const int type = nccl_type(t.dtype);
        const size_t width = dtype_size(t.dtype);
        for (const ArenaSpan& s : t.spans) {
          void* p = reinterpret_cast<void*>(imported(*s.chunk) + s.offset);
          check_nccl(nccl_.AllReduce(p, p, s.bytes / width, type, NcclLibrary::kAvg, comm_,
                                     stream_),
                     "ncclAllReduce");
          total += s.bytes;
        }
      }
    } catch (...) {
      nccl_.GroupEnd();
      throw;
    }
    check_nccl(nccl_.GroupEnd(), "ncclGroupEnd");
    wait(fmt::format("all-reduce of {} tensors ({} bytes) in device memory", tensors.size(),
                     total));
  }

 private:
  void current() { check_cuda(cuda_.CtxSetCurrent(context_), "cuCtxSetCurrent"); }

  CuDevicePtr imported(const vk::Buffer& chunk) {
    try {
      return imports_->pointer(chunk);
    } catch (const DistributedError& e) {
      throw DistributedError(fmt::format("rank {}: {}", rank_, e.what()));
    }
  }

  CuDevicePtr staging(size_t bytes) {
    if (bytes > staging_bytes_) {
      if (staging_) check_cuda(cuda_.MemFree(staging_), "cuMemFree");
      staging_ = 0;
      staging_bytes_ = 0;
      check_cuda(cuda_.MemAlloc(&staging_, bytes), "cuMemAlloc");
      staging_bytes_ = bytes;
    }
    return staging_;
  }

  void reduce_host(void* data, size_t bytes, size_t count, int type, const char* what) {
    if (count == 0) return;
    current();
    const CuDevicePtr d = staging(bytes);
    check_cuda(cuda_.MemcpyHtoDAsync(d, data, bytes, stream_), "cuMemcpyHtoDAsync");
    void* p = reinterpret_cast<void*>(d);
    check_nccl(nccl_.AllReduce(p, p, count, type, NcclLibrary::kSum, comm_, stream_),
               "ncclAllReduce");
    wait(fmt::format("{} ({} values)", what, count));
    check_cuda(cuda_.MemcpyDtoH(data, d, bytes), "cuMemcpyDtoH");
  }

  // Polls the stream until the collective completes, NCCL reports an error, or the timeout
  // passes; the last two leave the communicator unusable (aborted).
  void wait(const std::string& what) {
    auto done = [&] {
      const CuResult rc = cuda_.StreamQuery(stream_);
      if (rc == CudaLibrary::kSuccess) return true;
      if (rc != CudaLibrary::kNotReady) {
        broken_ = true;
        throw DistributedError(fmt::format("rank {} of {}: the {} failed: {}", rank_, size_, what,
                                           cuda_.error_text("cuStreamQuery", rc)));
      }
      NcclResult async = NcclLibrary::kSuccess;
      nccl_.CommGetAsyncError(comm_, &async);
      if (async != NcclLibrary::kSuccess && async != NcclLibrary::kInProgress) {
        broken_ = true;
        throw DistributedError(fmt::format("rank {} of {}: the {} failed: {}", rank_, size_, what,
                                           nccl_.error_text("NCCL", async)));
      }
      return false;
    };
    poll_until(done, timeout_, rank_, size_, what, [&] { broken_ = true; });
  }

  void check_cuda(CuResult rc, const char* call) const {
    if (rc != CudaLibrary::kSuccess) {
      throw DistributedError(fmt::format("rank {}: {}", rank_, cuda_.error_text(call, rc)));
    }
  }
  void check_nccl(NcclResult rc, const char* call) const {
    if (rc != NcclLibrary::kSuccess) {
      throw DistributedError(fmt::format("rank {}: {}", rank_, nccl_.error_text(call, rc)));
    }
  }

  const CudaLibrary& cuda_;
  const NcclLibrary& nccl_;
  int rank_, size_;
  double timeout_;
  std::shared_ptr<Communicator> launcher_;  // the MPI job that started this one, if any
  int device_index_ = 0;
  CuDevice device_ = 0;
  std::array<uint8_t, 16> uuid_{};
  CuContext context_ = nullptr;
  CuStream stream_ = nullptr;
  NcclComm comm_ = nullptr;
  CuDevicePtr staging_ = 0;
  size_t staging_bytes_ = 0;
  std::unique_ptr<CudaImports> imports_;
  bool broken_ = false;
};

}  // namespace

std::shared_ptr<Communicator> nccl_world(double timeout_seconds) {
  // The job's shape first: a bad environment is reported wherever NCCL is missing too.
  const bool by_mpi = launched_by_mpi();
  const std::optional<EnvLaunch> job = by_mpi ? std::nullopt : env_launch();
  const NcclLibrary& nccl = nccl_library();
  cuda_library();
  const int local = vk::local_rank().value_or(0);
  NcclUniqueId id{};
  auto id_bytes = std::as_writable_bytes(std::span(id.internal));
  auto get_id = [&](int rank) {
    if (rank != 0) return;
    if (const NcclResult rc = nccl.GetUniqueId(&id); rc != NcclLibrary::kSuccess) {
      throw DistributedError(nccl.error_text("ncclGetUniqueId", rc));
    }
  };
  if (by_mpi) {
    std::shared_ptr<Communicator> mpi = mpi_world(timeout_seconds);
    get_id(mpi->rank());
    mpi->broadcast(id_bytes, 0);
    return std::make_shared<NcclCommunicator>(mpi->rank(), mpi->size(), local, id,
                                              timeout_seconds, mpi);
  }
  const EnvLaunch one{};
  const EnvLaunch& j = job ? *job : one;
  get_id(j.rank);
  share_from_rank0(id_bytes, j, timeout_seconds);
  return std::make_shared<NcclCommunicator>(j.rank, j.size, local, id, timeout_seconds, nullptr);
}

}  // namespace mn::dist
