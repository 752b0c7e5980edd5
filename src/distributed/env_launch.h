#pragma once
// A job started by environment, as PyTorch's launchers (torchrun) start one: RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT; and the one exchange such a job needs before NCCL takes over,
// rank 0's NCCL id sent to every rank over TCP.
#include <cstddef>
#include <optional>
#include <span>
#include <string>

namespace mn::dist {

struct EnvLaunch {
  int rank = 0, size = 1;
  std::string master_addr;  // rank 0's host
  int master_port = 0;
};

// Whether WORLD_SIZE is set: the process belongs to a job started by environment.
bool launched_by_env();

// The job of the environment; nullopt when WORLD_SIZE is unset. mn::Error naming the variable
// for a value that is not a number in range, or for RANK, MASTER_ADDR or MASTER_PORT missing
// where the job has more than one rank.
std::optional<EnvLaunch> env_launch();

// Rank 0's `bytes` into every rank's `bytes` (the same size everywhere): rank 0 listens on
// MASTER_PORT and answers every other rank, which connects to MASTER_ADDR (retrying while rank 0
// starts). mn::DistributedError when the ranks have not all met within `timeout_seconds`, or one
// sends something else.
void share_from_rank0(std::span<std::byte> bytes, const EnvLaunch& job, double timeout_seconds);

}  // namespace mn::dist
