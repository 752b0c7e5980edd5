#pragma once
// The host side of data-parallel training (the Trainer's, with a Communicator): each rank's
// rows of a global batch, the gradient sums averaged over the ranks between the step's two
// programs (split_training_step), and rank 0's tensors on every rank.
#include <set>
#include <string>
#include <vector>

#include <meganeura/distributed.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>

namespace mn::train {

// Rows [rank * rows, (rank + 1) * rows) of `global` (fewer, or none, where a short last batch
// ends before them): `rows` is each rank's batch.
TensorBatch shard_batch(const TensorBatch& global, int rank, int64_t rows);

// Whether `comm` averages tensors in device memory (NCCL): the session's memory must then be
// exportable (SessionOptions::exportable_memory).
bool reduces_in_place(const Communicator& comm);

// Every named tensor of `s` replaced by its mean over the ranks: in place in device memory where
// the engine can and the session's memory is exportable; else one all-reduce of them all through
// the host, summed in f32 whatever they store.
void average_over_ranks(Session& s, const std::vector<std::string>& names, Communicator& comm);

// The gradient sums that checkpoints leave out: with one micro-batch an update they hold the
// last gradients, nothing a resumed run needs (and what a one-process run's file lacks).
std::set<std::string> transient_sums(const SplitTrainingStep& split, const Optimizer& opt);

// The update of a split step: the gradient sums averaged over the ranks, then the "update"
// program as update `update` (1-based) at learning rate `lr`, then the model's own statistics
// (BatchNorm's running mean and variance, floating-point states of no parameter) averaged, so
// that every rank evaluates and checkpoints the same model. `check_ranks`: then
// check_same_parameters.
void update_over_ranks(Session& s, const SplitTrainingStep& split, const Optimizer& opt,
                       double lr, int64_t update, Communicator& comm, bool check_ranks);

// Whether every rank holds the parameters and optimizer states rank 0 holds (a 64-bit FNV-1a
// checksum of their bytes, compared through one broadcast and one all-reduce); else a
// DistributedError naming the ranks that differ and update `update`. Other states (BatchNorm's
// running statistics, measured on each rank's own samples) are left out.
void check_same_parameters(Session& s, Communicator& comm, int64_t update);

// Rank 0's parameters and states in every rank's session: the ranks start from one set of
// weights whichever way each rank made or loaded its own.
void broadcast_persistents(Session& s, Communicator& comm);

}  // namespace mn::train
