#pragma once
// Data-parallel training across processes: one process per device, each with its own session;
// gradients are averaged over the processes before every update, so every process keeps the
// same parameters. A Communicator is the engine under it (MPI; NCCL on NVIDIA GPUs), loaded at
// run time: nothing of it is a build or link dependency of the library.
//
//   auto world = mn::connect_distributed({.engine = mn::DistributedEngine::automatic});
//   mn::Trainer trainer(loss, {..., .communicator = world});   // loss of this rank's batch
//
// `mpirun -np 4 prog` then trains on four processes; started without mpirun, `automatic` runs
// on one process (no communicator). docs/distributed.md.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <meganeura/error.h>

namespace mn {

// A collective did not complete: another process died, stopped taking part, or disagrees on
// what it sends. The message names this process's rank, the collective and its size.
class DistributedError : public Error {
 public:
  using Error::Error;
};

// The processes of one job, numbered 0 to size() - 1. Every collective must be called by every
// process, in the same order, with the same sizes.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string engine() const = 0;  // "mpi", "nccl"
  // Sums `values` over the processes in place; every process gets the same sums.
  virtual void all_reduce_sum(std::span<float> values) = 0;
  virtual void all_reduce_sum(std::span<double> values) = 0;
  // Rank `root`'s bytes into every process's `bytes` (the same size everywhere).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  // Ends every process of the job with `code`, after this one met an error the others cannot
  // see (they would otherwise wait for it until their timeout).
  [[noreturn]] virtual void abort(int code) = 0;
};

enum class DistributedEngine : uint8_t { none, mpi, nccl, automatic };
// "none", "mpi", "nccl", "auto"; anything else is an mn::Error listing them.
DistributedEngine distributed_engine_from_name(const std::string& name);
const char* distributed_engine_name(DistributedEngine e);

struct DistributedOptions {
  DistributedEngine engine = DistributedEngine::automatic;
  // A collective still incomplete after this many seconds is a DistributedError (a rank died
  // or hangs) instead of a wait without end. 0: $MN_DISTRIBUTED_TIMEOUT, else 600.
  double timeout_seconds = 0;
};

// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI).
bool launched_by_mpi();
// Whether it was started by environment, as PyTorch's launchers (torchrun) start processes:
// WORLD_SIZE is set (with RANK, and MASTER_ADDR and MASTER_PORT for more than one rank).
bool launched_by_env();

// The job this process belongs to. `automatic`: MPI when an MPI launcher started the process,
// NCCL when the environment did, else none. `none` (or automatic without a launcher): nullptr,
// training on this process alone.
// `mpi`: Open MPI's library (libmpi.so.40) loaded at run time, initialised once per process and
// finalised at exit; started without a launcher it is a job of one.
// `nccl` (NVIDIA GPUs): the CUDA driver (libcuda.so.1) and NCCL (libnccl.so.2) loaded at run
// time; the local rank's CUDA device, which must be the session's Vulkan device; gradients
// averaged in place in the session's memory, exported to CUDA. Under mpirun MPI passes NCCL's id
// around; started by environment rank 0 sends it over TCP (MASTER_ADDR:MASTER_PORT); started by
// neither it is a job of one. A bad launch environment is an mn::Error naming the variable.
// A missing library is an mn::Error saying what to install.
std::shared_ptr<Communicator> connect_distributed(const DistributedOptions& options = {});

}  // namespace mn
