// `mn generate` and `mn chat` run as a user runs them, on the tiny fixture models: the text and
// JSON they print, and the errors (exit code 1, a message naming what is wrong) for bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <meganeura/causal_lm.h>
#include <meganeura/data.h>
#include <meganeura/finetune.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>
#include <meganeura/tokenizer.h>

#include "support/run_command.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

const std::string kModels = std::string(MN_SOURCE_DIR) + "/tests/fixtures/lm/models/";

TEST(GenerateCli, PrintsTransformersGreedyContinuationAndJson) {
  const std::string model = kModels + "llama_tied";
  auto r = test::run_mn("generate " + model + " --prompt 'The Zen of Python, by' --max-tokens 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The reference continuation (transformers' greedy generate), decoded by our tokenizer.
  SafetensorsReader ref(std::string(MN_SOURCE_DIR) +
                        "/tests/fixtures/lm/reference/llama_tied.safetensors");
  const Array prompt = ref.array("prompt_0"), greedy = ref.array("greedy_0");
  std::vector<int32_t> continuation;
  for (size_t i = prompt.data.size(); i < greedy.data.size(); ++i)
    continuation.push_back(static_cast<int32_t>(greedy.data[i]));
  const std::string text = Tokenizer::from_dir(model).decode(continuation, true);
  EXPECT_EQ(r.out.substr(0, text.size()), text);
  const auto j = nlohmann::json::parse(test::last_line(r.out));
  EXPECT_EQ(j.at("prompt_tokens").get<int64_t>(), static_cast<int64_t>(prompt.data.size()));
  EXPECT_EQ(j.at("generated_tokens").get<int64_t>(), static_cast<int64_t>(continuation.size()));
  for (const char* key : {"prefill_ms", "ms_per_token", "tokens_per_second", "device"})
    EXPECT_TRUE(j.contains(key)) << key;
}

// Decode steps chained into one submission (the default 8, or --decode-chain 3) print the text
// that one submission a token prints.
TEST(GenerateCli, DecodeChainsPrintTheSameText) {
  const std::string run = "generate " + kModels + "qwen3_tiny --prompt 'The Zen of Python, by' " +
                          "--max-tokens 20 --temperature 0.8 --top-k 30 --seed 5";
  auto single = test::run_mn(run + " --decode-chain 1");
  ASSERT_EQ(single.exit_code, 0) << single.err;
  for (const char* chain : {"", " --decode-chain 3"}) {
    auto chained = test::run_mn(run + chain);
    ASSERT_EQ(chained.exit_code, 0) << chained.err;
    EXPECT_EQ(chained.out, single.out) << chain;
  }
}

// A 16-bit KV cache (--kv-dtype bf16): the session's arena is smaller by half the f32 caches,
// and the model still generates what it is asked for.
TEST(GenerateCli, SixteenBitKvCache) {
  const std::string run = "generate " + kModels + "llama_tied --prompt 'The Zen of Python, by' " +
                          "--max-tokens 8 --max-context 1024 --json";
  auto f32 = test::run_mn(run);
  auto bf16 = test::run_mn(run + " --kv-dtype bf16");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const auto a = nlohmann::json::parse(test::last_line(f32.out));
  const auto b = nlohmann::json::parse(test::last_line(bf16.out));
  EXPECT_EQ(b.at("generated_tokens").get<int64_t>(), 8);
  EXPECT_LT(b.at("arena_mib").get<double>(), a.at("arena_mib").get<double>());
}

TEST(GenerateCli, ChatTemplateAndBatchOfPrompts) {
  auto r = test::run_mn("generate " + kModels + "qwen3_tiny --chat --system 'Be brief.' "
                        "--prompt 'Hello' --prompt 'What is flat?' --max-tokens 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--- 0: Hello"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--- 1: What is flat?"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(test::last_line(r.out)).at("batch").get<int>(), 2);
}

// --adapter: the same text as the model directory with the adapter merged in and saved.
TEST(GenerateCli, AdapterGeneratesAsTheMergedModel) {
  const std::string base_dir = kModels + "qwen3_tiny";
  const std::string adapter = std::string(MN_SOURCE_DIR) + "/tests/fixtures/lm/finetuned/qwen3_lora";
  test::ScratchDir merged("adapter-cli");
  {
    const HfModel base = load_hf_model(base_dir);
    CausalLmOptions o;
    o.sequence = 1;
    CausalLm lm = build_causal_lm(base.config, o);
    auto s = build_session(*lm.graph);
    load_weights(*s, base);
    merge_lora_adapter(*s, base.config, adapter);
    HfSaveOptions so;
    so.tokenizer_dir = base_dir;
    so.generation = base.generation;
    save_hf_model(merged.path() / "model", *s, base.config, so);
  }
  const std::string prompt = " --prompt 'The Zen of Python, by' --max-tokens 12";
  auto with_adapter = test::run_mn("generate " + base_dir + " --adapter " + adapter + prompt);
  ASSERT_EQ(with_adapter.exit_code, 0) << with_adapter.err;
  auto saved = test::run_mn("generate " + (merged.path() / "model").string() + prompt);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_EQ(with_adapter.out, saved.out);
  auto missing = test::run_mn("generate " + base_dir + " --adapter " + base_dir + prompt);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("adapter_config.json"), std::string::npos) << missing.err;
}

TEST(GenerateCli, StopStringEndsTheText) {
  const std::string model = kModels + "llama_tied";
  auto full = test::run_mn("generate " + model + " --prompt 'The Zen of Python, by'");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_GT(full.out.size(), 6u);
  const std::string stop = full.out.substr(3, 2);
  auto cut = test::run_mn("generate " + model + " --prompt 'The Zen of Python, by' --stop '" +
                          stop + "' --json");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_EQ(cut.out.substr(0, full.out.find(stop)) + "\n",
            cut.out.substr(0, full.out.find(stop) + 1));
  EXPECT_EQ(nlohmann::json::parse(test::last_line(cut.out)).at("finish")[0], "stop_string");
}

TEST(ChatCli, TwoTurnsFromStandardInput) {
  auto r = test::run_mn("chat " + kModels + "llama_bf16_sharded --max-tokens 4",
                        "Hello there\n/reset\nHow are you?\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

const std::string kSmolVlm = std::string(MN_SOURCE_DIR) + "/tests/fixtures/smolvlm/";

// The chat prompt with the wide image, as tests/fixtures/smolvlm's reference: transformers'
// greedy continuation.
TEST(GenerateCli, SmolVlmDescribesAnImageAsTransformers) {
  auto r = test::run_mn("generate " + kSmolVlm + "model --image " + kSmolVlm + "wide.png --chat "
                        "--prompt 'What is in this image?' --max-tokens 8 --frames-per-call 7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  SafetensorsReader ref(kSmolVlm + "reference.safetensors");
  const Array prompt = ref.array("input_ids"), greedy = ref.array("greedy");
  std::vector<int32_t> continuation;
  for (size_t i = prompt.data.size(); i < greedy.data.size(); ++i)
    continuation.push_back(static_cast<int32_t>(greedy.data[i]));
  const std::string text = Tokenizer::from_dir(kSmolVlm + "model").decode(continuation, true);
  EXPECT_EQ(r.out.substr(0, text.size()), text);
  const auto j = nlohmann::json::parse(test::last_line(r.out));
  EXPECT_EQ(j.at("prompt_tokens").get<int64_t>(), static_cast<int64_t>(prompt.data.size()));
}

struct BadInput {
  std::string args, message;
};

class GenerateCliErrors : public ::testing::TestWithParam<BadInput> {};

TEST_P(GenerateCliErrors, ExitOneAndSayWhat) {
  auto r = test::run_mn(GetParam().args);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, GenerateCliErrors,
    ::testing::Values(
        BadInput{"generate /nonexistent/model --prompt hi", "/nonexistent/model"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --temperature -1",
                 "--temperature"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --top-p 0", "--top-p"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --top-k -2", "--top-k"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --max-tokens -3", "--max-tokens"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --dtype i32", "--dtype"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --dtype fp8", "--dtype"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --kv-dtype int8", "--kv-dtype"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --precision f64", "--precision"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --stop ''", "--stop"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --decode-chain 0",
                 "--decode-chain"},
        BadInput{"generate " + kModels + "llama_tied --prompt ''", "empty"},
        BadInput{"generate " + kModels +
                     "llama_tied --prompt hi --max-context 8 "
                     "--max-tokens 16",
                 "exceeds the context of 8"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --image " + kSmolVlm + "wide.png",
                 "--image needs a vision-language model"},
        BadInput{"generate " + kModels + "llama_tied --prompt hi --frames-per-call 2",
                 "--frames-per-call needs a vision-language model"},
        BadInput{
            "generate " + kSmolVlm + "model --prompt a --prompt b --image " + kSmolVlm + "wide.png",
            "1 --image for 2 --prompt"},
        BadInput{"generate " + kSmolVlm + "model --prompt a --image /nonexistent.png",
                 "/nonexistent.png"},
        BadInput{"generate " + kSmolVlm + "model --prompt a --frames-per-call 0",
                 "--frames-per-call"}));

}  // namespace
}  // namespace mn
