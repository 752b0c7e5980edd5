#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "distributed/mpi_library.h"
#include "distributed/poll.h"

namespace mn::dist {

namespace {

// Whether a collective of this process timed out: MPI_Finalize would then wait for the ranks
// that never answered, so the exit aborts the job instead.
bool g_broken = false;

void finalize_at_exit() {
  const MpiLibrary& mpi = mpi_library();
  int finalized = 0;
  mpi.Finalized(&finalized);
  if (finalized) return;
  if (g_broken) {
    std::fflush(nullptr);
    mpi.Abort(mpi.comm_world, 1);
  }
  mpi.Finalize();
}

// MPI_Init_thread once per process (unless the program initialised MPI itself).
void initialize(const MpiLibrary& mpi) {
  static std::once_flag once;
  std::call_once(once, [&] {
    int initialized = 0;
    mpi.Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    const int rc = mpi.Init_thread(nullptr, nullptr, MpiLibrary::kThreadFunneled, &provided);
    if (rc != MpiLibrary::kSuccess) throw DistributedError(mpi.error_text("MPI_Init_thread", rc));
    std::atexit(finalize_at_exit);
  });
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const MpiLibrary& mpi, double timeout_seconds)
      : mpi_(mpi), timeout_(timeout_seconds) {
    // A communicator of our own: collectives of the program's MPI code never match ours.
    check(mpi_.Comm_dup(mpi_.comm_world, &comm_), "MPI_Comm_dup");
    check(mpi_.Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(mpi_.Comm_size(comm_, &size_), "MPI_Comm_size");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return "mpi"; }

  void all_reduce_sum(std::span<float> values) override {
    reduce(values.data(), values.size(), mpi_.type_float, sizeof(float), "all-reduce of floats");
  }
  void all_reduce_sum(std::span<double> values) override {
    reduce(values.data(), values.size(), mpi_.type_double, sizeof(double),
           "all-reduce of doubles");
  }

  void broadcast(std::span<std::byte> bytes, int root) override {
    if (root < 0 || root >= size_) {
      throw DistributedError(fmt::format("broadcast from rank {}: the job has ranks 0 to {}", root,
                                         size_ - 1));
    }
    for (size_t at = 0; at < bytes.size(); at += kChunk) {
      const size_t n = std::min(kChunk, bytes.size() - at);
      MpiHandle request = nullptr;
      check(mpi_.Ibcast(bytes.data() + at, static_cast<int>(n), mpi_.type_byte, root, comm_,
                        &request),
            "MPI_Ibcast");
      wait(request, fmt::format("broadcast of {} bytes from rank {}", bytes.size(), root));
    }
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(nullptr);
    mpi_.Abort(mpi_.comm_world, code);
    std::_Exit(code);
  }

 private:
  // MPI counts are ints: larger buffers go in pieces.
  static constexpr size_t kChunk = size_t{1} << 30;

  void reduce(void* data, size_t count, MpiHandle type, size_t width, const char* what) {
    auto* bytes = static_cast<std::byte*>(data);
    for (size_t at = 0; at < count; at += kChunk) {
      const size_t n = std::min(kChunk, count - at);
      MpiHandle request = nullptr;
      check(mpi_.Iallreduce(MpiLibrary::kInPlace, bytes + at * width, static_cast<int>(n), type,
                            mpi_.op_sum, comm_, &request),
            "MPI_Iallreduce");
      wait(request, fmt::format("{} ({} values)", what, count));
    }
  }

  // Polls the request until it completes or the timeout passes; a timeout leaves the job
  // unusable (the request stays pending), so the process aborts the job when it exits.
  void wait(MpiHandle& request, const std::string& what) {
    auto done = [&] {
      int complete = 0;
      check(mpi_.Test(&request, &complete, nullptr), "MPI_Test");
      return complete != 0;
    };
    poll_until(done, timeout_, rank_, size_, what, [] { g_broken = true; });
  }

  void check(int rc, const char* call) const {
    if (rc != MpiLibrary::kSuccess) {
      throw DistributedError(fmt::format("rank {}: {}", rank_, mpi_.error_text(call, rc)));
    }
  }

  const MpiLibrary& mpi_;
  double timeout_;
  MpiHandle comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::shared_ptr<Communicator> mpi_world(double timeout_seconds) {
  const MpiLibrary& mpi = mpi_library();
  initialize(mpi);
  return std::make_shared<MpiCommunicator>(mpi, timeout_seconds);
}

}  // namespace mn::dist
