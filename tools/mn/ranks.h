#pragma once
// Data-parallel runs of the training commands (mn train, mn finetune): the ranks from
// --distributed, each rank's share of --batch, and an error on one rank ending the job.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <meganeura/distributed.h>

namespace mn::cli {

// The ranks of the job (null: this process alone); a name that is not an engine is an error
// naming --distributed.
std::shared_ptr<Communicator> connect_ranks(const std::string& engine);

// Each rank's share of --batch; an error naming --batch unless the ranks divide it.
int64_t rank_batch(int64_t batch, const Communicator& comm);

// Runs `body`. In a job of several ranks, an error on this one is printed with `command` and
// the rank, and ends the whole job: the other ranks would otherwise wait for this one in their
// next all-reduce until their timeout.
void run_on_ranks(const char* command, const std::shared_ptr<Communicator>& comm,
                  const std::function<void()>& body);

}  // namespace mn::cli
