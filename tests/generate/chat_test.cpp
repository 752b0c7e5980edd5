// Conversations keep the KV cache across turns: a second turn runs only its new tokens and
// replies exactly as a fresh model given the whole conversation.
#include <gtest/gtest.h>

#include <meganeura/chat.h>
#include <meganeura/hf.h>

namespace mn {
namespace {

const std::filesystem::path kLm = std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm";

std::unique_ptr<LmRunner> runner_for(const HfModel& m) {
  LmRunnerOptions o;
  o.max_context = 128;
  o.prefill_block = 16;
  return LmRunner::create(m, o);
}

class Chat : public ::testing::TestWithParam<std::string> {};

TEST_P(Chat, SecondTurnReusesTheCacheAndRepliesAsFromScratch) {
  const std::filesystem::path dir = kLm / "models" / GetParam();
  const HfModel model = load_hf_model(dir);
  const Tokenizer tok = Tokenizer::from_dir(dir);
  StopOptions stop;
  stop.max_new_tokens = 6;
  stop.stop_ids = tok.stop_ids();

  auto runner = runner_for(model);
  Conversation chat(*runner, tok, "Be brief.");
  const GeneratedSequence first = chat.reply("Simple is better than complex?", {}, stop);
  const GeneratedSequence second = chat.reply("And flat?", {}, stop);
  ASSERT_EQ(chat.messages().size(), 5u);
  EXPECT_EQ(chat.messages()[2].content, first.text);

  // The same tokens from scratch: the first prompt, the first reply as generated, then the text
  // the template adds for the second turn.
  const std::vector<ChatMessage> one(chat.messages().begin(), chat.messages().begin() + 2);
  const std::vector<ChatMessage> two(chat.messages().begin(), chat.messages().end() - 1);
  std::vector<int32_t> all = tok.encode_chat(one, true);
  const size_t first_prompt = all.size();
  all.insert(all.end(), first.tokens.begin(), first.tokens.end());
  const std::string so_far = tok.format_chat(one, true) + tok.decode(first.tokens, false);
  const std::string full = tok.format_chat(two, true);
  ASSERT_TRUE(full.starts_with(so_far));
  const std::vector<int32_t> rest = tok.encode(full.substr(so_far.size()), false);
  all.insert(all.end(), rest.begin(), rest.end());
  // Only the second turn's tokens ran (plus the first reply's last, sampled but not yet run).
  EXPECT_EQ(chat.last_turn_new_tokens(), static_cast<int64_t>(rest.size()) + 1);
  EXPECT_GT(static_cast<int64_t>(first_prompt), chat.last_turn_new_tokens());

  auto fresh = runner_for(model);
  const auto whole = generate(*fresh, {all}, {}, stop);
  EXPECT_EQ(second.tokens, whole[0].tokens);
}

TEST_P(Chat, TurnThatDoesNotFitLeavesTheConversationUnchanged) {
  const std::filesystem::path dir = kLm / "models" / GetParam();
  const HfModel model = load_hf_model(dir);
  auto runner = runner_for(model);
  Conversation chat(*runner, Tokenizer::from_dir(dir));
  StopOptions stop;
  stop.max_new_tokens = 100;
  EXPECT_THROW(chat.reply(std::string(200, 'x'), {}, stop), Error);
  EXPECT_TRUE(chat.messages().empty());
  stop.max_new_tokens = 4;
  EXPECT_NO_THROW(chat.reply("hello", {}, stop));
  EXPECT_EQ(chat.messages().size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Chat, ::testing::Values("llama_tied", "llama_bf16_sharded"));

TEST(ChatTemplate, ModelOfBatchTwoIsRejected) {
  const std::filesystem::path dir = kLm / "models" / "llama_tied";
  const HfModel model = load_hf_model(dir);
  LmRunnerOptions o;
  o.batch = 2;
  o.max_context = 32;
  o.prefill_block = 8;
  auto runner = LmRunner::create(model, o);
  EXPECT_THROW(Conversation(*runner, Tokenizer::from_dir(dir)), Error);
}

}  // namespace
}  // namespace mn
