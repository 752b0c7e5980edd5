#pragma once
// The NCCL engine: one CUDA device per rank, NCCL's collectives on a stream of its own.
// Gradients are averaged in place in the session's Vulkan memory, exported to CUDA
// (DeviceAverage); the host collectives of the Communicator interface go through a staging
// buffer on the device.
#include <memory>

#include <meganeura/distributed.h>

namespace mn::dist {

// This process's rank in the job: by mpirun (MPI broadcasts NCCL's id), by environment (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 sends the id over TCP), else a job of one.
// The CUDA device is the local rank's (modulo the devices). Collectives time out after
// `timeout_seconds`. mn::Error when CUDA's driver or NCCL cannot be loaded.
std::shared_ptr<Communicator> nccl_world(double timeout_seconds);

}  // namespace mn::dist
