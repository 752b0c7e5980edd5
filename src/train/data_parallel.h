#pragma once
// The host side of data-parallel training (the Trainer's, with a Communicator): each rank's
// rows of a global batch, the gradient sums averaged over the ranks between the step's two
// programs (split_training_step), and rank 0's tensors on every rank.
#include <string>
#include <vector>

#include <meganeura/distributed.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>

namespace mn::train {

// Rows [rank * rows, (rank + 1) * rows) of `global` (fewer, or none, where a short last batch
// ends before them): `rows` is each rank's batch.
TensorBatch shard_batch(const TensorBatch& global, int rank, int64_t rows);

// Every named tensor of `s` replaced by its mean over the ranks: one all-reduce of them all,
// summed in f32 whatever they store.
void average_over_ranks(Session& s, const std::vector<std::string>& names, Communicator& comm);

// Rank 0's parameters and states in every rank's session: the ranks start from one set of
// weights whichever way each rank made or loaded its own.
void broadcast_persistents(Session& s, Communicator& comm);

}  // namespace mn::train
