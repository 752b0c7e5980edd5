#include "ranks.h"

#include <cstdio>
#include <exception>

namespace mn::cli {

std::shared_ptr<Communicator> connect_ranks(const std::string& engine) {
  if (engine != "auto" && engine != "none" && engine != "mpi" && engine != "nccl") {
    throw Error("--distributed " + engine + ": expected auto, none, mpi or nccl");
  }
  return connect_distributed({.engine = distributed_engine_from_name(engine)});
}

int64_t rank_batch(int64_t batch, const Communicator& comm) {
  if (batch % comm.size() != 0) {
    throw Error("--batch " + std::to_string(batch) + ": expected a multiple of the " +
                std::to_string(comm.size()) +
                " ranks (each trains on an equal share of every batch)");
  }
  return batch / comm.size();
}

void run_on_ranks(const char* command, const std::shared_ptr<Communicator>& comm,
                  const std::function<void()>& body) {
  if (!comm || comm->size() == 1) return body();
  try {
    body();
  } catch (const DistributedError& e) {  // names the rank itself
    std::fprintf(stderr, "%s: %s\n", command, e.what());
    comm->abort(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d of %d: %s\n", command, comm->rank(), comm->size(),
                 e.what());
    comm->abort(1);
  }
}

}  // namespace mn::cli
