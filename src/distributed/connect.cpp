// Choosing the engine of a job: by name, or by how the process was started.
#include <cmath>
#include <cstdlib>
#include <string>

#include <meganeura/distributed.h>

#include "distributed/env_launch.h"
#include "distributed/mpi_communicator.h"
#include "distributed/nccl_communicator.h"

namespace mn {

namespace {

constexpr double kDefaultTimeoutSeconds = 600;

double timeout_of(const DistributedOptions& o) {
  if (o.timeout_seconds < 0 || !std::isfinite(o.timeout_seconds)) {
    throw Error("DistributedOptions::timeout_seconds is " + std::to_string(o.timeout_seconds) +
                ", expected a positive number of seconds (0: $MN_DISTRIBUTED_TIMEOUT or 600)");
  }
  if (o.timeout_seconds > 0) return o.timeout_seconds;
  const char* env = std::getenv("MN_DISTRIBUTED_TIMEOUT");
  if (!env || !*env) return kDefaultTimeoutSeconds;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    throw Error(std::string("MN_DISTRIBUTED_TIMEOUT is '") + env +
                "', expected a positive number of seconds");
  }
  return v;
}

}  // namespace

DistributedEngine distributed_engine_from_name(const std::string& name) {
  if (name == "none") return DistributedEngine::none;
  if (name == "mpi") return DistributedEngine::mpi;
  if (name == "nccl") return DistributedEngine::nccl;
  if (name == "auto") return DistributedEngine::automatic;
  throw Error("unknown distributed engine '" + name + "' (expected none, mpi, nccl or auto)");
}

const char* distributed_engine_name(DistributedEngine e) {
  switch (e) {
    case DistributedEngine::none:
      return "none";
    case DistributedEngine::mpi:
      return "mpi";
    case DistributedEngine::nccl:
      return "nccl";
    case DistributedEngine::automatic:
      return "auto";
  }
  return "?";
}

bool launched_by_env() { return dist::launched_by_env(); }

bool launched_by_mpi() {
  // Open MPI's mpirun, MPICH/Hydra and Slurm's PMI, PMIx.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (const char* v = std::getenv(var); v && *v) return true;
  }
  return false;
}

std::shared_ptr<Communicator> connect_distributed(const DistributedOptions& options) {
  const double timeout = timeout_of(options);
  switch (options.engine) {
    case DistributedEngine::none:
      return nullptr;
    case DistributedEngine::automatic:
      if (launched_by_mpi()) return dist::mpi_world(timeout);
      return launched_by_env() ? dist::nccl_world(timeout) : nullptr;
    case DistributedEngine::mpi:
      if (!launched_by_mpi() && launched_by_env()) {
        throw Error("the MPI engine needs mpirun (or another MPI launcher); a job started by "
                    "environment (WORLD_SIZE, RANK, MASTER_ADDR) takes the NCCL engine (nccl)");
      }
      return dist::mpi_world(timeout);
    case DistributedEngine::nccl:
      return dist::nccl_world(timeout);
  }
  return nullptr;
}

}  // namespace mn
