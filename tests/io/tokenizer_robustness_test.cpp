// Malformed input of every shape fails with an mn::Error, never with another exception or a
// crash: tokenizer.json with random values replaced, and random regex patterns run on text.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include <meganeura/tokenizer.h>

#include "io/regex.h"
#include "io/tokenizer_cases.h"
#include "io/utf8.h"

namespace mn {
namespace {

using nlohmann::json;

json random_value(std::mt19937& rng) {
  switch (rng() % 7) {
    case 0:
      return nullptr;
    case 1:
      return static_cast<int>(rng() % 2000) - 5;
    case 2:
      return "x y";
    case 3:
      return json::array({"a", 1});
    case 4:
      return json::object({{"type", "BPE"}});
    case 5:
      return rng() % 2 == 0;
    default:
      return 3.5;
  }
}

// Replaces one node (reached by a random walk from the root) by a random value, or removes it.
void mutate(json& j, std::mt19937& rng) {
  json* node = &j;
  for (int depth = 0; depth < 6 && (node->is_object() || node->is_array()) && !node->empty();
       ++depth) {
    auto it = node->begin();
    std::advance(it, rng() % node->size());
    if (rng() % 3 == 0 || !(it->is_object() || it->is_array())) {
      if (node->is_object() && rng() % 4 == 0) {
        node->erase(it.key());
      } else {
        *it = random_value(rng);
      }
      return;
    }
    node = &*it;
  }
}

TEST(TokenizerRobustness, MutatedFilesFailWithMnErrors) {
  std::mt19937 rng(7);
  for (const std::string style : {"gpt2", "llama3", "qwen"}) {
    const json base = json::parse(test::read_text(test::tokenizer_dir(style) / "tokenizer.json"));
    for (int i = 0; i < 150; ++i) {
      json j = base;
      for (int k = 0; k < 1 + int(rng() % 3); ++k) mutate(j, rng);
      try {
        const Tokenizer tok = Tokenizer::from_json(j.dump());
        const std::vector<int32_t> ids = tok.encode("Hello <|im_end|> wörld 123!");
        (void)tok.decode(ids);
      } catch (const Error&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << style << " mutation " << i << ": " << e.what() << "\n"
                      << j.dump().substr(0, 300);
      }
    }
  }
}

TEST(TokenizerRobustness, RandomPatternsFailWithRegexErrors) {
  const std::vector<std::string> pieces = {
      "a",  "b",          "|",       "(",   ")",      "(?:",     "(?i:", "(?!", "(?=", "(?>",
      "[",  "]",          "^",       "-",   "\\p{L}", "\\P{N}",  "\\s",  "\\S", "\\d", "\\w",
      "\\", "?",          "*",       "+",   "{2}",    "{1,3}",   "{",    "}",   ".",   "$",
      "é",  "\\x{1F600}", "\\u00e9", "\\r", "\\n",    "\\p{Zz}", "(?i)", "'s"};
  const io::CodePoints text = io::decode_utf8("ab 's 12 é\r\nÉ\tx-y 😀", "text");
  std::mt19937 rng(11);
  int compiled = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string pattern;
    for (int k = 0; k < 1 + int(rng() % 8); ++k) pattern += pieces[rng() % pieces.size()];
    try {
      const io::Regex re = io::Regex::compile(pattern);
      std::vector<std::pair<uint32_t, uint32_t>> spans;
      re.find_all(text.cps, spans);
      for (auto [a, b] : spans) ASSERT_TRUE(a < b && b <= text.cps.size()) << pattern;
      ++compiled;
    } catch (const RegexError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << pattern << ": " << e.what();
    }
  }
  EXPECT_GT(compiled, 300);  // the generator makes valid patterns too
}

}  // namespace
}  // namespace mn
