// Every way a tokenizer file can be refused: the exception type, and a message that names the
// file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include <meganeura/tokenizer.h>

#include "io/tokenizer_cases.h"

#include "support/scratch_dir.h"

namespace mn {
namespace {

using nlohmann::json;
using test::read_text;
using test::tokenizer_dir;

const std::string kSource = "/models/demo/tokenizer.json";

json fixture(const std::string& style = "gpt2") {
  return json::parse(read_text(tokenizer_dir(style) / "tokenizer.json"));
}

// Runs `f`, expecting exception E whose message contains every one of `parts`.
template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

template <class E>
void expect_json_error(const json& j, const std::vector<std::string>& parts) {
  std::vector<std::string> all = parts;
  all.push_back(kSource);
  expect_error<E>([&] { Tokenizer::from_json(j.dump(), {}, kSource); }, all);
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (const std::string type : {"WordPiece", "Unigram", "WordLevel"}) {
    json j = fixture();
    j["model"]["type"] = type;
    expect_json_error<UnsupportedTokenizerError>(j, {"model.type", type});
  }
}

TEST(TokenizerErrors, UnsupportedModelOptions) {
  json j = fixture();
  j["model"]["byte_fallback"] = true;
  expect_json_error<UnsupportedTokenizerError>(j, {"model.byte_fallback"});
  j = fixture();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_json_error<UnsupportedTokenizerError>(j, {"model.continuing_subword_prefix"});
  j = fixture();
  j["model"]["dropout"] = 0.1;
  expect_json_error<UnsupportedTokenizerError>(j, {"model.dropout"});
  j = fixture();
  j["truncation"] = {{"max_length", 8}};
  expect_json_error<UnsupportedTokenizerError>(j, {"truncation"});
}

TEST(TokenizerErrors, UnknownNormalizer) {
  json j = fixture();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_json_error<UnsupportedTokenizerError>(j, {"normalizer.type", "Lowercase"});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKD"}}}}};
  expect_json_error<UnsupportedTokenizerError>(j, {"normalizer.normalizers[1].type", "NFKD"});
}

TEST(TokenizerErrors, UnsupportedPipelineSteps) {
  json j = fixture();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_json_error<UnsupportedTokenizerError>(j, {"pre_tokenizer.type", "Metaspace"});
  j = fixture();
  j["pre_tokenizer"] = nullptr;
  expect_json_error<UnsupportedTokenizerError>(j, {"pre_tokenizer", "ByteLevel"});
  j = fixture("llama3");
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_json_error<UnsupportedTokenizerError>(
      j, {"pre_tokenizer.pretokenizers[0].behavior", "Removed"});
  j = fixture();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_json_error<UnsupportedTokenizerError>(j, {"post_processor.type", "RobertaProcessing"});
  j = fixture();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_json_error<UnsupportedTokenizerError>(j, {"decoder.type", "WordPiece"});
}

TEST(TokenizerErrors, BadRegex) {
  json j = fixture("qwen");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|(?<=x)y";
  expect_json_error<RegexError>(
      j, {"pre_tokenizer.pretokenizers[0].pattern", "(?<=x)y", "position 9"});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a-z";
  expect_json_error<RegexError>(j, {"missing ']'", "position 0"});
}

TEST(TokenizerErrors, MalformedFields) {
  expect_error<FormatError>([] { Tokenizer::from_json("{\"model\": ", {}, kSource); },
                            {kSource, "invalid JSON"});
  json j = fixture();
  j["model"].erase("vocab");
  expect_json_error<FormatError>(j, {"model.vocab", "missing"});
  j = fixture();
  j["model"]["merges"][3] = {"Ġ", "no-such-token"};
  expect_json_error<FormatError>(j, {"model.merges[3]", "no-such-token"});
  j = fixture();
  j["model"]["merges"][0] = "one-part";
  expect_json_error<FormatError>(j, {"model.merges[0]", "one-part"});
  j = fixture();
  j["added_tokens"][1].erase("content");
  expect_json_error<FormatError>(j, {"added_tokens[1].content"});
  j = fixture();
  j["model"]["vocab"]["a"] = "seven";
  expect_json_error<FormatError>(j, {"model.vocab[\"a\"]"});
  j = fixture("llama3");
  j["post_processor"]["special_tokens"]["<|begin_of_text|>"]["ids"] = {9999};
  expect_json_error<FormatError>(j, {"post_processor", "9999"});
  // Ids far past the count of tokens would size the id tables by them (gigabytes for a few
  // bytes of JSON): refused, naming the token.
  j = fixture();
  j["model"]["vocab"]["far"] = 777776103;
  expect_json_error<FormatError>(j, {"model.vocab[\"far\"]", "777776103", "unused"});
  j = fixture();
  j["added_tokens"][0]["content"] = "<|far|>";
  j["added_tokens"][0]["id"] = 2000000000;
  expect_json_error<FormatError>(j, {"added_tokens[0].id", "<|far|>", "2000000000"});
}

using test::ScratchDir;

TEST(TokenizerErrors, MissingFiles) {
  ScratchDir dir;
  const std::string missing = (dir.path() / "tokenizer.json").string();
  expect_error<FormatError>([&] { Tokenizer::from_dir(dir.path()); }, {missing});
  expect_error<FormatError>([&] { Tokenizer::from_dir(dir.path() / "nope"); }, {"nope"});
  dir.write("tokenizer.json", "{not json");
  expect_error<FormatError>([&] { Tokenizer::from_dir(dir.path()); }, {missing, "invalid JSON"});
}

TEST(TokenizerErrors, BadConfig) {
  ScratchDir dir;
  dir.write("tokenizer.json", read_text(tokenizer_dir("gpt2") / "tokenizer.json"));
  const std::string config = (dir.path() / "tokenizer_config.json").string();
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  expect_error<FormatError>([&] { Tokenizer::from_dir(dir.path()); }, {config, "bos_token", "<s>"});
  dir.write("tokenizer_config.json", R"({"eos_token": {"lstrip": false}})");
  expect_error<FormatError>([&] { Tokenizer::from_dir(dir.path()); },
                            {config, "eos_token.content"});
  dir.write("tokenizer_config.json", R"([1, 2])");
  expect_error<FormatError>([&] { Tokenizer::from_dir(dir.path()); }, {config});
  dir.write("tokenizer_config.json", R"({"eos_token": {"content": "<|im_end|>"},
      "chat_template": "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"})");
  const Tokenizer tok = Tokenizer::from_dir(dir.path());
  EXPECT_EQ(tok.eos_id(), tok.token_id("<|im_end|>"));
  const std::vector<ChatMessage> chat = {{"user", "hi"}};
  expect_error<UnsupportedTokenizerError>([&] { tok.format_chat(chat, true); },
                                          {config, "chat_template"});
}

}  // namespace
}  // namespace mn
