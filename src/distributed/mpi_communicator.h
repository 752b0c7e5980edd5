#pragma once
// The MPI engine: collectives staged through host memory, so it works with any Vulkan device
// (lavapipe included) and across machines.
#include <memory>

#include <meganeura/distributed.h>

namespace mn::dist {

// MPI_COMM_WORLD of this process (initialised on first use, finalised at exit; a process
// started without a launcher is a world of one). Collectives time out after `timeout_seconds`.
std::shared_ptr<Communicator> mpi_world(double timeout_seconds);

}  // namespace mn::dist
