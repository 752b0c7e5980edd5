// Encoding and decoding against Hugging Face `tokenizers` on the fixture tokenizers.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <meganeura/tokenizer.h>

#include "io/tokenizer_cases.h"

namespace mn {
namespace {

using test::parse_ids;
using test::tokenizer_cases;
using test::tokenizer_dir;

class TokenizerCases : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerCases, EncodeMatchesHuggingFace) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir(GetParam()));
  const auto& lines = tokenizer_cases()["lines"];
  const auto& ids = tokenizer_cases()[GetParam()]["ids"];
  ASSERT_GE(lines.size(), 1000u);
  int failures = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = lines[i].get<std::string>();
    const std::vector<int32_t> got = tok.encode(line), want = parse_ids(ids[i].get<std::string>());
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << GetParam() << " line " << i << ": \"" << line << "\"\n got  "
                    << ::testing::PrintToString(got) << "\n want "
                    << ::testing::PrintToString(want);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(TokenizerCases, DecodeMatchesHuggingFace) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir(GetParam()));
  const auto& cases = tokenizer_cases()[GetParam()];
  const auto& lines = tokenizer_cases()["lines"];
  const std::string prefix = tok.decode(tok.encode(""));
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string key = std::to_string(i), line = lines[i].get<std::string>();
    const std::vector<int32_t> ids = parse_ids(cases["ids"][i].get<std::string>());
    const std::string want =
        cases["decoded"].contains(key) ? cases["decoded"][key].get<std::string>() : prefix + line;
    const std::string want_skip =
        cases["decoded_skip"].contains(key) ? cases["decoded_skip"][key].get<std::string>() : line;
    EXPECT_EQ(tok.decode(ids), want) << GetParam() << " line " << i;
    EXPECT_EQ(tok.decode(ids, true), want_skip) << GetParam() << " line " << i;
  }
}

TEST_P(TokenizerCases, ChatMatchesTemplate) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir(GetParam()));
  for (const auto& c : tokenizer_cases()[GetParam()]["chats"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) {
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    const bool gen = c["add_generation_prompt"].get<bool>();
    EXPECT_EQ(tok.format_chat(messages, gen), c["text"].get<std::string>());
    EXPECT_EQ(tok.encode_chat(messages, gen), c["ids"].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerCases, ::testing::Values("gpt2", "llama3", "qwen"));

// Template layouts of released models: a default system message written when the conversation
// has none, Llama 3's trimmed contents, Llama 3.1's system header with the knowledge cutoff and
// date, and a Llama 3 template that leaves bos out.
TEST(Tokenizer, ChatTemplateVariantsMatchJinja) {
  for (const auto& t : tokenizer_cases()["templates"]) {
    const std::string name = t["name"].get<std::string>();
    const bool llama = name.rfind("llama3", 0) == 0;
    const std::string style = llama ? "llama3" : "gpt2";
    nlohmann::json config = {{"chat_template", t["template"]}};
    if (llama) config["bos_token"] = "<|begin_of_text|>";
    const Tokenizer tok =
        Tokenizer::from_json(test::read_text(tokenizer_dir(style) / "tokenizer.json"),
                             config.dump(), (tokenizer_dir(style) / "tokenizer.json").string());
    for (const auto& c : t["cases"]) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) {
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      EXPECT_EQ(tok.format_chat(messages, c["add_generation_prompt"].get<bool>()),
                c["text"].get<std::string>())
          << name;
    }
  }
}

// What the three fixtures leave out ("a b" merges, ignore_merges, lstrip/rstrip/single_word and
// normalized added tokens, a String split, add_prefix_space, a Sequence post-processor).
TEST(Tokenizer, FeaturesMatchHuggingFace) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_dir("features") / "tokenizer.json");
  const auto& c = tokenizer_cases()["features"];
  for (size_t i = 0; i < c["lines"].size(); ++i) {
    const std::string line = c["lines"][i].get<std::string>();
    const std::vector<int32_t> ids = tok.encode(line);
    EXPECT_EQ(ids, parse_ids(c["ids"][i].get<std::string>())) << "line " << i << ": " << line;
    if (i < c["decoded"].size()) {
      EXPECT_EQ(tok.decode(ids), c["decoded"][i].get<std::string>()) << "line " << i;
    }
  }
}

TEST(Tokenizer, SpecialTokensFromConfig) {
  const Tokenizer gpt2 = Tokenizer::from_dir(tokenizer_dir("gpt2"));
  EXPECT_EQ(gpt2.bos_id(), gpt2.token_id("<|im_start|>"));
  EXPECT_EQ(gpt2.eos_id(), gpt2.token_id("<|im_end|>"));
  EXPECT_EQ(gpt2.pad_id(), gpt2.token_id("<|im_end|>"));
  EXPECT_FALSE(gpt2.add_bos_token());
  const std::vector<int32_t> gpt2_stops = {*gpt2.token_id("<|endoftext|>"),
                                           *gpt2.token_id("<|im_end|>")};
  EXPECT_EQ(gpt2.stop_ids(), gpt2_stops);

  const Tokenizer llama = Tokenizer::from_dir(tokenizer_dir("llama3"));
  EXPECT_EQ(llama.bos_id(), llama.token_id("<|begin_of_text|>"));
  EXPECT_EQ(llama.eos_id(), llama.token_id("<|eot_id|>"));
  EXPECT_TRUE(llama.add_bos_token());
  const std::vector<int32_t> llama_stops = {*llama.token_id("<|end_of_text|>"),
                                            *llama.token_id("<|eot_id|>")};
  EXPECT_EQ(llama.stop_ids(), llama_stops);
  EXPECT_EQ(llama.encode("hi").front(), *llama.bos_id());
  EXPECT_NE(llama.encode("hi", false).front(), *llama.bos_id());

  const Tokenizer qwen = Tokenizer::from_dir(tokenizer_dir("qwen"));
  EXPECT_FALSE(qwen.bos_id().has_value());
  EXPECT_EQ(qwen.vocab_size(), 700);
  EXPECT_TRUE(qwen.is_special(*qwen.token_id("<|im_end|>")));
  EXPECT_FALSE(qwen.is_special(*qwen.token_id("a")));
  EXPECT_EQ(qwen.token(*qwen.token_id("<|im_end|>")), "<|im_end|>");
  EXPECT_FALSE(qwen.token(100000).has_value());
}

TEST(Tokenizer, WithoutConfigThereAreNoSpecialRoles) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_dir("gpt2") / "tokenizer.json");
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_FALSE(tok.eos_id().has_value());
  const std::vector<ChatMessage> chat = {{"user", "hi"}};
  EXPECT_THROW(tok.format_chat(chat, true), UnsupportedTokenizerError);
}

// A byte without a token (an incomplete alphabet, made here by removing NUL's "Ā"): dropped
// without unk_token, unk_token with one, an error when unk_token is not in the vocabulary.
TEST(Tokenizer, ByteWithoutToken) {
  nlohmann::json j =
      nlohmann::json::parse(test::read_text(tokenizer_dir("gpt2") / "tokenizer.json"));
  ASSERT_EQ(j["model"]["vocab"].erase("\u0100"), 1u);
  const Tokenizer plain = Tokenizer::from_json(j.dump());
  std::vector<int32_t> a = plain.encode("a"), b = plain.encode("b"), ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  EXPECT_EQ(plain.encode(std::string("a\0b", 3)), ab);

  j["model"]["unk_token"] = "<|endoftext|>";
  const Tokenizer with_unk = Tokenizer::from_json(j.dump());
  std::vector<int32_t> a_unk_b = a;
  a_unk_b.push_back(*with_unk.token_id("<|endoftext|>"));
  a_unk_b.insert(a_unk_b.end(), b.begin(), b.end());
  EXPECT_EQ(with_unk.encode(std::string("a\0b", 3)), a_unk_b);

  j["model"]["unk_token"] = "<unk>";
  const Tokenizer bad_unk = Tokenizer::from_json(j.dump(), {}, "/m/tokenizer.json");
  EXPECT_EQ(bad_unk.encode("ab"), plain.encode("ab"));
  try {
    bad_unk.encode(std::string("a\0b", 3));
    ADD_FAILURE() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/m/tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("<unk>"), std::string::npos) << e.what();
  }
}

// One tokenizer shared by threads (the word cache is shared): the same ids as alone.
TEST(Tokenizer, ConcurrentEncoding) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir("qwen"));
  const auto& lines = tokenizer_cases()["lines"];
  const auto& ids = tokenizer_cases()["qwen"]["ids"];
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < lines.size(); i += 2) {
        if (tok.encode(lines[i].get<std::string>()) != parse_ids(ids[i].get<std::string>())) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir("gpt2"));
  const std::vector<int32_t> bad = {5, 700};
  EXPECT_THROW(tok.decode(bad), Error);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(tok.decode(negative), Error);
}

TEST(Tokenizer, EncodeRejectsInvalidUtf8) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir("gpt2"));
  EXPECT_THROW(tok.encode("ab\xC3"), FormatError);
  EXPECT_THROW(tok.encode("\xFF"), FormatError);
}

// Streaming: the concatenated pieces are the whole decode, and no piece ends inside a UTF-8
// sequence even though byte-level tokens split multi-byte characters.
TEST(TokenStream, StreamsCompleteCharacters) {
  for (const std::string style : {"gpt2", "llama3", "qwen"}) {
    const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir(style));
    const std::string text = "Émoji 👨‍👩‍👧‍👦 and 日本語 with 👍🏽, done.";
    const std::vector<int32_t> ids = tok.encode(text, false);
    TokenStream stream(tok);
    std::string joined;
    bool split_seen = false;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      const int32_t one[1] = {id};
      if (tok.decode_bytes(one).size() != piece.size()) split_seen = true;
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << style;
      joined += piece;
    }
    joined += stream.flush();
    EXPECT_EQ(joined, text) << style;
    EXPECT_TRUE(split_seen) << style << ": the text should split characters across tokens";
  }
}

TEST(TokenStream, FlushReplacesAnIncompleteTail) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir("gpt2"));
  // The first byte of "é" (C3) alone: held back, then replaced at the end.
  const auto c3 = tok.token_id("Ã");
  ASSERT_TRUE(c3.has_value());
  TokenStream stream(tok);
  EXPECT_EQ(stream.push(*c3), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  const std::vector<int32_t> one = {*c3};
  EXPECT_EQ(tok.decode(one), "\xEF\xBF\xBD");
}

// tokenizer_config.json's clean_up_tokenization_spaces: decode removes the spaces as
// transformers' clean_up_tokenization does (expected text from its Python definition), and the
// stream's pieces join to the same text whichever tokens the patterns straddle.
TEST(Tokenizer, CleansUpSpacesWhereTheConfigAsks) {
  const std::string text =
      "Hello , world ! I 'm sure it 's fine . They 've gone ? We 're here , aren 't we ? "
      "Do n't ' quote ' ok  .";
  const std::string cleaned =
      "Hello, world! I'm sure it's fine. They've gone? We're here, aren 't we? Don't'quote'ok .";
  EXPECT_EQ(clean_up_tokenization(text), cleaned);
  for (const std::string style : {"gpt2", "llama3", "qwen"}) {
    const std::string json = test::read_text(tokenizer_dir(style) / "tokenizer.json");
    const Tokenizer plain = Tokenizer::from_json(json, R"({"clean_up_tokenization_spaces": false})");
    const Tokenizer tidy = Tokenizer::from_json(json, R"({"clean_up_tokenization_spaces": true})");
    EXPECT_FALSE(plain.cleans_up_spaces());
    EXPECT_TRUE(tidy.cleans_up_spaces());
    const std::vector<int32_t> ids = tidy.encode(text, false);
    EXPECT_EQ(plain.decode(ids), text) << style;
    EXPECT_EQ(tidy.decode(ids), cleaned) << style;
    TokenStream stream(tidy);
    std::string joined;
    for (int32_t id : ids) joined += stream.push(id);
    joined += stream.flush();
    EXPECT_EQ(joined, cleaned) << style;
    // Patterns that overlap or repeat: the stream still joins to the whole decode.
    for (const std::string odd : {"a ' ' b", " ,  , . ", "it 's 's", "x ' s ' ", "n 't n't  n 't"}) {
      const std::vector<int32_t> odd_ids = tidy.encode(odd, false);
      EXPECT_EQ(tidy.decode(odd_ids), clean_up_tokenization(odd)) << style;
      TokenStream s2(tidy);
      std::string j2;
      for (int32_t id : odd_ids) j2 += s2.push(id);
      j2 += s2.flush();
      EXPECT_EQ(j2, tidy.decode(odd_ids)) << style << ": " << odd;
    }
  }
  EXPECT_THROW(Tokenizer::from_json(test::read_text(tokenizer_dir("gpt2") / "tokenizer.json"),
                                    R"({"clean_up_tokenization_spaces": "yes"})"),
               FormatError);
}

TEST(TokenStream, SkipsSpecialTokens) {
  const Tokenizer tok = Tokenizer::from_dir(tokenizer_dir("qwen"));
  TokenStream skipping(tok), keeping(tok, false);
  const int32_t end = *tok.token_id("<|im_end|>");
  EXPECT_EQ(skipping.push(end), "");
  EXPECT_EQ(keeping.push(end), "<|im_end|>");
}

}  // namespace
}  // namespace mn
