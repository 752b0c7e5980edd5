// `mn finetune` run as a user runs it: a short training with its JSON summary, and bad options
// ending with a non-zero exit and a message naming the option.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "finetune_support.h"
#include "support/run_command.h"

namespace mn {
namespace {

using testing::lm_fixture;
using testing::ScratchDir;

TEST(FinetuneCli, TwoStepsWithJsonSummary) {
  ScratchDir dir("cli");
  const auto text = dir.write("t.txt", testing::training_text());
  const auto r = test::run_mn("finetune " + lm_fixture("llama_tied").string() + " --text " +
                              text.string() + " --seq 16 --batch 2 --steps 2 --lr 1e-3 --save " +
                              (dir.path() / "out").string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(test::last_line(r.out));
  EXPECT_EQ(j.at("steps"), 2);
  EXPECT_TRUE(std::isfinite(j.at("final_loss").get<double>()));
  EXPECT_GT(j.at("final_loss").get<double>(), 0.0);
  EXPECT_GT(j.at("tokens_per_second").get<double>(), 0.0);
  EXPECT_FALSE(j.at("device").get<std::string>().empty());
  EXPECT_NE(r.err.find("step 2/2"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "out/model.safetensors"));
}

// Four steps in one run, or two, a checkpoint, and two more after --resume: the same last loss.
TEST(FinetuneCli, ResumeContinuesExactly) {
  ScratchDir dir("cli_resume");
  const auto text = dir.write("t.txt", testing::training_text());
  const auto ck = dir.path() / "ck.safetensors";
  const std::string base = "finetune " + lm_fixture("qwen2_tiny").string() + " --text " +
                           text.string() + " --seq 16 --batch 3 --lr 1e-3 --json ";
  const auto whole = test::run_mn(base + "--steps 4");
  const auto first = test::run_mn(base + "--steps 2 --checkpoint " + ck.string());
  const auto rest = test::run_mn(base + "--steps 4 --resume " + ck.string());
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  const auto a = nlohmann::json::parse(test::last_line(whole.out));
  const auto b = nlohmann::json::parse(test::last_line(rest.out));
  EXPECT_EQ(b.at("steps"), 4);
  EXPECT_EQ(a.at("final_loss").get<double>(), b.at("final_loss").get<double>());
  EXPECT_NE(rest.err.find("step 3/4"), std::string::npos) << rest.err;
  EXPECT_EQ(rest.err.find("step 1/4"), std::string::npos) << rest.err;
}

TEST(FinetuneCli, BadOptionsFail) {
  ScratchDir dir("cli_bad");
  const auto text = dir.write("t.txt", testing::training_text());
  const std::string base =
      "finetune " + lm_fixture("llama_tied").string() + " --text " + text.string() + " ";
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"--lora-rank 0", "--lora-rank must be positive, got 0"},
      {"--lora-rank -3", "--lora-rank must be positive, got -3"},
      {"--lora-rank 2 --lora-targets q_proj,wq", "unknown LoRA target 'wq'"},
      {"--seq 1", "--seq must be at least 2"},
      {"--dtype f16", "--dtype must be f32 or bf16, got 'f16'"},
      {"--schedule linear", "linear"},
      {"--save " + text.string(), "exists and is not a directory"},
  };
  for (const Case& c : cases) {
    const auto r = test::run_mn(base + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << " -> " << r.err;
  }
  const auto none = test::run_mn("finetune " + lm_fixture("llama_tied").string());
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("give --text or --jsonl"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace mn
