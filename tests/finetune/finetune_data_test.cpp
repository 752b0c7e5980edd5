// Token examples for fine-tuning: text windows with eos between documents, JSON lines of texts
// and chats (loss on assistant replies only), every malformed input named, and the shuffle.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <meganeura/error.h>
#include <meganeura/finetune.h>
#include <meganeura/tokenizer.h>

#include "finetune_support.h"

namespace mn {
namespace {

using testing::lm_fixture;
using testing::ScratchDir;
using testing::error_of;

Tokenizer chatml() { return Tokenizer::from_dir(lm_fixture("llama_tied")); }

std::vector<int32_t> row(const std::vector<int32_t>& v, int64_t i, int64_t L) {
  return {v.begin() + i * L, v.begin() + (i + 1) * L};
}

TEST(FinetuneData, TextDocumentsJoinedByEosAndCutIntoPaddedWindows) {
  ScratchDir dir("text");
  const Tokenizer tok = chatml();
  const auto file = dir.write("t.txt", "first document here\nstill the first\n\n  \nsecond one\n");
  const int64_t L = 5;
  const LmExamples ex = load_text_examples(file, tok, L);
  std::vector<int32_t> want = tok.encode("first document here\nstill the first", true);
  want.push_back(*tok.eos_id());
  const auto second = tok.encode("second one", true);
  want.insert(want.end(), second.begin(), second.end());
  want.push_back(*tok.eos_id());
  const auto windows = static_cast<int64_t>((want.size() + L - 1) / L);
  ASSERT_EQ(ex.count(), windows);
  for (size_t i = 0; i < static_cast<size_t>(windows * L); ++i) {
    if (i < want.size()) {
      EXPECT_EQ(ex.input_ids[i], want[i]) << i;
      EXPECT_EQ(ex.labels[i], want[i]) << i;
    } else {
      EXPECT_EQ(ex.labels[i], kIgnoreLabel) << "padding at " << i;
    }
  }
}

TEST(FinetuneData, JsonlTextsTruncatedOrPadded) {
  ScratchDir dir("jsonl");
  const Tokenizer tok = chatml();
  const auto file = dir.write("d.jsonl", "{\"text\": \"a short one\"}\n\n{\"text\": \"" +
                                             std::string(200, 'x') + " long\"}\n");
  const LmExamples ex = load_jsonl_examples(file, tok, 8);
  ASSERT_EQ(ex.count(), 2);
  EXPECT_EQ(ex.skipped, 0);
  const auto first = tok.encode("a short one", true);
  ASSERT_LT(first.size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(ex.labels[i], i < first.size() ? first[i] : kIgnoreLabel) << i;
  const auto second = tok.encode(std::string(200, 'x') + " long", true);
  EXPECT_EQ(row(ex.input_ids, 1, 8), std::vector<int32_t>(second.begin(), second.begin() + 8));
}

TEST(FinetuneData, ChatLabelsOnlyOnAssistantReplies) {
  ScratchDir dir("chat");
  const Tokenizer tok = chatml();
  const auto file = dir.write(
      "c.jsonl",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}, )"
      R"({"role": "assistant", "content": "Hi there!"}, {"role": "user", "content": "Help me."}, )"
      R"({"role": "assistant", "content": "Sure thing."}]})"
      "\n");
  const LmExamples ex = load_jsonl_examples(file, tok, 128);
  ASSERT_EQ(ex.count(), 1);
  std::vector<ChatMessage> messages = {{"system", "Be brief."},
                                       {"user", "Hello?"},
                                       {"assistant", "Hi there!"},
                                       {"user", "Help me."},
                                       {"assistant", "Sure thing."}};
  const auto ids = tok.encode_chat(messages, false);
  ASSERT_LE(ids.size(), 128u);
  std::string trained, ignored;
  for (size_t i = 0; i < 128; ++i) {
    const int32_t l = ex.labels[i];
    if (i < ids.size()) EXPECT_EQ(ex.input_ids[i], ids[i]);
    if (l != kIgnoreLabel) {
      EXPECT_EQ(l, ids[i]) << i;
      trained += tok.decode(std::vector<int32_t>{l});
    } else if (i < ids.size()) {
      ignored += tok.decode(std::vector<int32_t>{ids[i]});
    }
  }
  // The replies and the end of turn that closes each: what the model learns to say.
  EXPECT_EQ(trained, "Hi there!<|im_end|>\nSure thing.<|im_end|>\n");
  EXPECT_NE(ignored.find("Hello?"), std::string::npos);
  EXPECT_NE(ignored.find("Be brief."), std::string::npos);
  EXPECT_NE(ignored.find("<|im_start|>assistant\n"), std::string::npos);
}

// A chat whose reply lies past --seq tokens has nothing to train: skipped and counted.
TEST(FinetuneData, TruncatedAwayRepliesSkipped) {
  ScratchDir dir("skip");
  const auto file =
      dir.write("s.jsonl",
                "{\"text\": \"kept text\"}\n"
                R"({"messages": [{"role": "system", "content": "A long system message here."}, )"
                R"({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"
                "\n");
  const LmExamples ex = load_jsonl_examples(file, chatml(), 8);
  EXPECT_EQ(ex.count(), 1);
  EXPECT_EQ(ex.skipped, 1);
  EXPECT_EQ(load_jsonl_examples(file, chatml(), 64).skipped, 0);
}

TEST(FinetuneData, MalformedLinesNamed) {
  ScratchDir dir("bad");
  const Tokenizer tok = chatml();
  struct Case {
    std::string line, expect;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"ok\"", ":3: invalid JSON"},
      {"[1, 2]", ":3: not a JSON object"},
      {"{\"txt\": \"x\"}", ":3: an object with \"text\" or \"messages\""},
      {"{\"text\": 5}", ":3: 'text' must be a string"},
      {"{\"messages\": []}", ":3: 'messages' must be a non-empty list"},
      {"{\"messages\": [{\"role\": \"user\"}]}", ":3: messages[0]: 'content' must be a string"},
      {"{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}",
       ":3: messages[0]: unknown role 'bot'"},
  };
  for (const Case& c : cases) {
    const auto file = dir.write("b.jsonl", "{\"text\": \"fine\"}\n\n" + c.line + "\n");
    const std::string msg = error_of([&] { load_jsonl_examples(file, tok, 8); });
    EXPECT_NE(msg.find(file.string() + c.expect), std::string::npos) << c.line << " -> " << msg;
    EXPECT_THROW(load_jsonl_examples(file, tok, 8), FormatError);
  }
}

TEST(FinetuneData, MissingEmptyAndTooShort) {
  ScratchDir dir("empty");
  const Tokenizer tok = chatml();
  const auto missing = dir.path() / "nope.txt";
  EXPECT_NE(error_of([&] {
              load_text_examples(missing, tok, 8);
            }).find(missing.string() + ": cannot open"),
            std::string::npos);
  EXPECT_THROW(load_jsonl_examples(missing, tok, 8), FormatError);
  const auto empty = dir.write("e.txt", "\n  \n\n");
  EXPECT_NE(error_of([&] { load_text_examples(empty, tok, 8); }).find("no text to train on"),
            std::string::npos);
  const auto blank = dir.write("e.jsonl", "\n\n");
  EXPECT_NE(error_of([&] { load_jsonl_examples(blank, tok, 8); }).find("no example"),
            std::string::npos);
  // A chat without an assistant reply has nothing to learn.
  const auto no_reply =
      dir.write("u.jsonl", R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_THROW(load_jsonl_examples(no_reply, tok, 64), FormatError);
  const auto text = dir.write("t.txt", "some text");
  EXPECT_NE(error_of([&] {
              load_text_examples(text, tok, 1);
            }).find("at least 2 tokens (one to predict from and one to predict), got 1"),
            std::string::npos);
}

TEST(FinetuneData, EpochOrderIsASeededPermutation) {
  const auto a = epoch_order(50, 7, 0);
  EXPECT_EQ(a, epoch_order(50, 7, 0));
  EXPECT_NE(a, epoch_order(50, 7, 1));
  EXPECT_NE(a, epoch_order(50, 8, 0));
  std::set<int64_t> seen(a.begin(), a.end());
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 49);
}

}  // namespace
}  // namespace mn
