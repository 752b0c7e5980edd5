// `mpirun -np N mn train` and `mn finetune`: N ranks on lavapipe train the parameters that one
// process with the whole batch trains (MLP and CNN, 2 and 3 ranks; a Llama fully and a Qwen3's
// LoRA adapters), a checkpoint of 2 ranks resumes on 1, and a rank that fails or stops ends the
// job with an error naming it instead of a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include <meganeura/data.h>

#include "finetune/finetune_support.h"
#include "support/run_command.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

using test::CommandResult;

std::string mn_binary() { return std::string(MN_BINARY_DIR) + "/mn"; }

// Open MPI refuses root unless told; ranks outnumber CI's cores.
std::string mpirun(int ranks) {
  std::string env = geteuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "";
  return env + "mpirun --oversubscribe -np " + std::to_string(ranks) + " ";
}

bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

#define REQUIRE_MPIRUN() \
  ASSERT_TRUE(have_mpirun()) << "mpirun is missing: install Debian's openmpi-bin (scripts/setup.sh)"

// Every parameter of two checkpoints within `tol` × (1 + |value|).
void expect_same_parameters(const std::filesystem::path& a, const std::filesystem::path& b,
                            double tol) {
  const SafetensorsReader ra(a), rb(b);
  ASSERT_EQ(ra.entries().size(), rb.entries().size());
  int compared = 0;
  for (const SafetensorsEntry& e : ra.entries()) {
    ASSERT_TRUE(rb.contains(e.name)) << e.name;
    const Array x = ra.array(e.name), y = rb.array(e.name);
    ASSERT_EQ(x.shape, y.shape) << e.name;
    if (e.name.find('/') != std::string::npos) continue;  // optimizer state: follows the weights
    for (size_t i = 0; i < x.data.size(); ++i) {
      ASSERT_NEAR(x.data[i], y.data[i], tol * (1 + std::fabs(x.data[i])))
          << e.name << "[" << i << "]";
    }
    ++compared;
  }
  EXPECT_GE(compared, 4);
}

struct JobCase {
  const char* name;
  const char* args;  // mn train's, without --save
  int ranks;
  double tol;
};

class MpiTraining : public ::testing::TestWithParam<JobCase> {};

TEST_P(MpiTraining, RanksTrainWhatOneProcessTrains) {
  REQUIRE_MPIRUN();
  const JobCase& r = GetParam();
  test::ScratchDir dir("mpi-train");
  const std::string one = dir.path() / "one.safetensors", many = dir.path() / "many.safetensors";
  const CommandResult single =
      test::run_mn(std::string("train ") + r.args + " --distributed none --json --save " + one);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  // Every rank's parameters checked against rank 0's after every update.
  const CommandResult job = test::run_shell(mpirun(r.ranks) + mn_binary() + " train " + r.args +
                                            " --check-ranks --json --save " + many);
  ASSERT_EQ(job.exit_code, 0) << job.err << job.out;
  // Rank 0 alone prints the summary, which names the ranks.
  EXPECT_NE(job.out.find("\"ranks\":" + std::to_string(r.ranks)), std::string::npos) << job.out;
  EXPECT_EQ(job.err.find("over " + std::to_string(r.ranks) + " ranks (mpi)"),
            job.err.rfind("over " + std::to_string(r.ranks) + " ranks (mpi)"))
      << "printed by more than one rank:\n" << job.err;
  expect_same_parameters(one, many, r.tol);
}

INSTANTIATE_TEST_SUITE_P(
    Models, MpiTraining,
    ::testing::Values(
        JobCase{"mlp_sgd_2", "--model mlp --optimizer sgd --limit 512 --batch 64 --epochs 1", 2, 1e-6},
        // Adam divides by the gradients' scale: sums in another order move small elements more.
        JobCase{"mlp_adam_3_accumulate2",
            "--model mlp --limit 576 --batch 96 --epochs 1 --accumulate 2", 3, 5e-5},
        JobCase{"cnn_sgd_2", "--model cnn --optimizer sgd --limit 256 --batch 64 --epochs 1", 2,
            1e-6}),
    [](const auto& info) { return std::string(info.param.name); });

// A checkpoint saved by 2 ranks half-way through an accumulated update, resumed by 1 process,
// ends where one process running the whole way ends.
TEST(MpiTrainingResume, TwoRanksThenOne) {
  REQUIRE_MPIRUN();
  test::ScratchDir dir("mpi-resume");
  // 9 batches an epoch, updates every 2: the epoch's checkpoint holds half an update.
  const std::string args = " --model mlp --optimizer sgd --limit 576 --batch 64 --accumulate 2";
  const std::string half = dir.path() / "half.safetensors",
                    resumed = dir.path() / "resumed.safetensors",
                    whole = dir.path() / "whole.safetensors";
  const CommandResult a = test::run_shell(mpirun(2) + mn_binary() + " train" + args +
                                          " --epochs 1 --save " + half);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const CommandResult b = test::run_mn("train" + args + " --epochs 2 --distributed none --resume " +
                                       half + " --save " + resumed);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const CommandResult c =
      test::run_mn("train" + args + " --epochs 2 --distributed none --save " + whole);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  expect_same_parameters(whole, resumed, 1e-6);
}

// Fine-tuning a Hugging Face model: 2 ranks, each with half of every micro-batch, against 1
// process with all of it.
struct FinetuneCase {
  const char* name;
  const char* model;
  const char* args;
  const char* weights;  // the saved file compared
  double tol;
};

class MpiFinetune : public ::testing::TestWithParam<FinetuneCase> {};

TEST_P(MpiFinetune, RanksTrainWhatOneProcessTrains) {
  REQUIRE_MPIRUN();
  const FinetuneCase& c = GetParam();
  test::ScratchDir dir("mpi-finetune");
  const auto text = dir.write("t.txt", testing::training_text());
  const std::string args = " " + testing::lm_fixture(c.model).string() + " --text " +
                           text.string() + " --seq 16 " + c.args;
  const std::string one = dir.path() / "one", many = dir.path() / "many";
  const CommandResult single =
      test::run_mn("finetune" + args + " --distributed none --save " + one);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const CommandResult job = test::run_shell(mpirun(2) + mn_binary() + " finetune" + args +
                                            " --check-ranks --json --save " + many);
  ASSERT_EQ(job.exit_code, 0) << job.err << job.out;
  EXPECT_NE(job.out.find("\"ranks\":2"), std::string::npos) << job.out;
  expect_same_parameters(dir.path() / "one" / c.weights, dir.path() / "many" / c.weights, c.tol);
}

INSTANTIATE_TEST_SUITE_P(
    Models, MpiFinetune,
    ::testing::Values(FinetuneCase{"llama_full", "llama_tied", "--batch 4 --steps 3 --lr 1e-3",
                                   "model.safetensors", 5e-5},
                      // 24 examples in micro-batches of 10: the last leaves rank 1 none.
                      FinetuneCase{"llama_sgd_short_last_batch", "llama_tied",
                                   "--batch 10 --epochs 1 --optimizer sgd --lr 0.5",
                                   "model.safetensors", 1e-5},
                      // SGD: a wrong scale of the averaged gradients shows (Adam hides it).
                      FinetuneCase{"qwen3_lora_sgd_accumulate2", "qwen3_tiny",
                                   "--batch 4 --steps 3 --optimizer sgd --lr 0.5 --lora-rank 4 "
                                   "--accumulate 2",
                                   "adapter_model.safetensors", 1e-6}),
    [](const auto& info) { return std::string(info.param.name); });

// Two updates on 2 ranks, a checkpoint, two more on 1 process: where 4 on 1 process end.
TEST(MpiFinetuneResume, TwoRanksThenOne) {
  REQUIRE_MPIRUN();
  test::ScratchDir dir("mpi-finetune-resume");
  const auto text = dir.write("t.txt", testing::training_text());
  const std::string args = " " + testing::lm_fixture("llama_tied").string() + " --text " +
                           text.string() + " --seq 16 --batch 4 --lr 1e-3";
  const std::string ck = dir.path() / "ck.safetensors";
  const CommandResult first = test::run_shell(mpirun(2) + mn_binary() + " finetune" + args +
                                              " --steps 2 --checkpoint " + ck);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CommandResult rest = test::run_mn("finetune" + args + " --steps 4 --distributed none --resume " +
                                          ck + " --save " + (dir.path() / "resumed").string());
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  const CommandResult whole = test::run_mn("finetune" + args + " --steps 4 --distributed none --save " +
                                           (dir.path() / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  expect_same_parameters(dir.path() / "whole/model.safetensors",
                         dir.path() / "resumed/model.safetensors", 5e-5);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Rank 1 fails after the job started (its data is missing): its error ends every rank at once,
// long before the collectives' timeout.
TEST(MpiTrainingFailure, AFailedRankEndsTheJob) {
  REQUIRE_MPIRUN();
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = test::run_shell(
      "MN_DISTRIBUTED_TIMEOUT=300 " + mpirun(2) + "sh -c '" + mn_binary() +
      " train --limit 256 --epochs 1 $( [ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && echo --data "
      "/nonexistent-fashion-mnist )'");
  const std::string said = r.out + r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(said.find("rank 1 of 2"), std::string::npos) << said;
  EXPECT_NE(said.find("nonexistent-fashion-mnist"), std::string::npos) << said;
  EXPECT_LT(seconds_since(t0), 120);
}

// Rank 1 stops taking part (its data ends after 4 of rank 0's 8 steps and it leaves): rank 0's
// next all-reduce times out with an error naming the collective, and the job ends.
TEST(MpiTrainingFailure, ARankThatStopsTimesTheOthersOut) {
  REQUIRE_MPIRUN();
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = test::run_shell(
      "MN_DISTRIBUTED_TIMEOUT=5 " + mpirun(2) + "sh -c '" + mn_binary() +
      " train --epochs 1 --limit $( [ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && echo 256 || echo 512 )'");
  const std::string said = r.out + r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(said.find("rank 0 of 2: the all-reduce"), std::string::npos) << said;
  EXPECT_NE(said.find("did not complete within 5 s"), std::string::npos) << said;
  EXPECT_LT(seconds_since(t0), 120);
}

// Options and settings of a data-parallel run that cannot work: each an error naming it.
TEST(DistributedCli, BadEnginesSettingsAndLibrariesAreNamed) {
  test::ScratchDir dir("dist-cli");
  const auto text = dir.write("t.txt", testing::training_text());
  const std::string finetune =
      "finetune " + testing::lm_fixture("llama_tied").string() + " --text " + text.string() +
      " --seq 16 --steps 1 ";
  struct Bad {
    std::string command;  // after `mn`, with any environment before it
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {"train --limit 64 --distributed bogus",
       "--distributed bogus: expected auto, none, mpi or nccl"},
      {finetune + "--distributed bogus", "--distributed bogus: expected auto, none, mpi or nccl"},
      {finetune + "--optimizer lion", "unknown optimizer 'lion' (expected sgd, adam or adamw)"},
      {"MN_MPI_LIBRARY=/nonexistent/libmpi.so.40 " + mn_binary() +
           " train --limit 64 --distributed mpi",
       "'/nonexistent/libmpi.so.40', which cannot be loaded"},
      {"MN_DISTRIBUTED_TIMEOUT=soon " + mn_binary() + " train --limit 64",
       "MN_DISTRIBUTED_TIMEOUT is 'soon', expected a positive number of seconds"},
      {"MN_NCCL_LIBRARY=/nonexistent/libnccl.so.2 " + mn_binary() +
           " train --limit 64 --distributed nccl",
       "'/nonexistent/libnccl.so.2', which cannot be loaded"},
      // Started by environment (torchrun's variables): checked before any library is loaded.
      {"WORLD_SIZE=2 RANK=0 " + mn_binary() + " train --limit 64",
       "MASTER_ADDR is not set: a job of several ranks needs rank 0's host"},
      {"WORLD_SIZE=2 RANK=5 MASTER_ADDR=localhost MASTER_PORT=29500 " + mn_binary() +
           " train --limit 64 --distributed nccl",
       "RANK is '5', expected a whole number from 0 to 1"},
      {"WORLD_SIZE=two " + mn_binary() + " " + finetune + "--distributed auto",
       "WORLD_SIZE is 'two', expected a whole number from 1"},
      {"WORLD_SIZE=2 RANK=1 MASTER_ADDR=localhost MASTER_PORT=29500 " + mn_binary() +
           " train --limit 64 --distributed mpi",
       "the MPI engine needs mpirun"},
  };
  for (const Bad& c : cases) {
    const bool with_env = c.command.find('=') < c.command.find(' ');
    const CommandResult r = with_env ? test::run_shell(c.command) : test::run_mn(c.command);
    EXPECT_NE(r.exit_code, 0) << c.command;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.command << "\n" << r.err;
  }
}

// A batch the ranks cannot share, and a model that trains on one process only.
TEST(MpiTrainingFailure, OptionsTheRanksCannotShareAreNamed) {
  REQUIRE_MPIRUN();
  test::ScratchDir dir("mpi-bad");
  const auto text = dir.write("t.txt", testing::training_text());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" train --limit 64 --batch 63", "--batch 63: expected a multiple of the 2 ranks"},
      {" train --model unet --limit 64", "--distributed"},
      {" finetune " + testing::lm_fixture("llama_tied").string() + " --text " + text.string() +
           " --seq 16 --steps 1 --batch 3",
       "--batch 3: expected a multiple of the 2 ranks"},
  };
  for (const auto& [args, expected] : cases) {
    const CommandResult r = test::run_shell(mpirun(2) + mn_binary() + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE((r.out + r.err).find(expected), std::string::npos) << args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace mn
