// The pre-tokenizer regex engine: leftmost-first semantics, quantifier flavours, lookahead, case
// folding, Unicode classes, and the syntax it refuses.
#include <gtest/gtest.h>

#include <meganeura/tokenizer.h>

#include "io/regex.h"
#include "io/utf8.h"

namespace mn::io {
namespace {

// The matched substrings of `text`.
std::vector<std::string> matches(std::string_view pattern, std::string_view text) {
  const Regex re = Regex::compile(pattern);
  const CodePoints cps = decode_utf8(text, "test");
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  re.find_all(cps.cps, spans);
  std::vector<std::string> out;
  for (auto [a, b] : spans) {
    out.emplace_back(text.substr(cps.offsets[a], cps.offsets[b] - cps.offsets[a]));
  }
  return out;
}

using V = std::vector<std::string>;

TEST(Regex, AlternationIsLeftmostFirstNotLongest) {
  EXPECT_EQ(matches("a|ab", "ab"), V({"a"}));
  EXPECT_EQ(matches("ab|a", "ab"), V({"ab"}));
  EXPECT_EQ(matches("x(?:a|ab)c", "xabc"), V({"xabc"}));  // backtracks into the alternation
}

TEST(Regex, Quantifiers) {
  EXPECT_EQ(matches("a+", "aaa baa"), V({"aaa", "aa"}));
  EXPECT_EQ(matches("a+?", "aaa"), V({"a", "a", "a"}));
  EXPECT_EQ(matches("ba?", "ba b"), V({"ba", "b"}));
  EXPECT_EQ(matches("\\d{1,3}", "1234567"), V({"123", "456", "7"}));
  EXPECT_EQ(matches("\\d{2}", "12345"), V({"12", "34"}));
  EXPECT_EQ(matches("x\\d{2,}", "x1 x12 x12345"), V({"x12", "x12345"}));
  EXPECT_EQ(matches("a*ab", "aaab"), V({"aaab"}));  // greedy gives back
  EXPECT_TRUE(matches("a*+ab", "aaab").empty());    // possessive does not
  EXPECT_TRUE(matches("(?>a*)ab", "aaab").empty());
  EXPECT_EQ(matches("a{2", "a{2"), V({"a{2"}));  // not a quantifier: literal brace
}

TEST(Regex, Lookahead) {
  // GPT-2's \s+(?!\S): a run of spaces before a word leaves its last space to the word.
  EXPECT_EQ(matches(" ?\\w+|\\s+(?!\\S)|\\s+", "a   b"), V({"a", "  ", " b"}));
  EXPECT_EQ(matches("\\w+(?=!)", "hi! yo"), V({"hi"}));
}

TEST(Regex, CaseInsensitiveGroup) {
  EXPECT_EQ(matches("(?i:'s|'ll)", "'S 'Ll 's"), V({"'S", "'Ll", "'s"}));
  EXPECT_EQ(matches("(?i:x)y", "XY Xy"), V({"Xy"}));  // the flag ends with its group
  EXPECT_EQ(matches("(?i)[a-c]+", "AbC"), V({"AbC"}));
  EXPECT_EQ(matches("(?i)[A-Z]+", "k\u212A\u00e9"), V({"k\u212A"}));  // Kelvin sign folds to k
  EXPECT_EQ(matches("(?i)[\u00e0-\u00ff]+", "\u00c9\u00e9"), V({"\u00c9\u00e9"}));
  EXPECT_EQ(matches("(?i:\u00e9)", "\u00c9"), V({"\u00c9"}));
}

TEST(Regex, UnicodeClasses) {
  EXPECT_EQ(matches("\\p{L}+", "héllo 日本 مرحبا x1"), V({"héllo", "日本", "مرحبا", "x"}));
  EXPECT_EQ(matches("\\p{N}+", "a½12٣Ⅻ"), V({"½12٣Ⅻ"}));
  EXPECT_EQ(matches("\\pL+", "ab1"), V({"ab"}));
  EXPECT_EQ(matches("\\s+", "a\u00a0\u3000b\tc\r\n"), V({"\u00a0\u3000", "\t", "\r\n"}));
  EXPECT_EQ(matches("[^\\s\\p{L}\\p{N}]+", "a, b!? 👍🏽"), V({",", "!?", "👍🏽"}));
  EXPECT_EQ(matches("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", " hi\nyo"), V({" hi", "yo"}));
  EXPECT_EQ(matches("\\P{L}+", "ab12cd"), V({"12"}));
  EXPECT_EQ(matches("[\\x41-\\x{43}]+", "ABCD"), V({"ABC"}));
  EXPECT_EQ(matches("\\p{Lu}\\p{Ll}+", "Hello WORLD"), V({"Hello"}));
}

TEST(Regex, RejectsUnsupportedSyntaxWithPosition) {
  struct Bad {
    const char* pattern;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"(?<=a)b", "position 2"}, Bad{"a\\bc", "position 1"}, Bad{"[[:alpha:]]", "position 1"},
        Bad{"(ab", "position 0"}, Bad{"ab)", "position 2"}, Bad{"\\p{Greek}", "Greek"},
        Bad{"*a", "position 0"}, Bad{"(?:a*)*", "position 6"}, Bad{"a{3,1}", "position 1"},
        Bad{"x\\", "trailing"}}) {
    try {
      Regex::compile(b.pattern);
      ADD_FAILURE() << b.pattern << " compiled";
    } catch (const RegexError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(b.pattern), std::string::npos) << msg;
      EXPECT_NE(msg.find(b.message), std::string::npos) << msg;
    }
  }
}

// Groups nested thousands deep (a fuzzer's input overflowed the stack of the recursive parser)
// are refused at the first group past 256 levels, with its position; 256 levels compile.
TEST(Regex, GroupsNestedPastTheDepthLimitAreRefused) {
  const std::string deep = std::string(4000, '(') + "a" + std::string(4000, ')');
  try {
    Regex::compile(deep);
    ADD_FAILURE() << "compiled";
  } catch (const RegexError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("nested deeper than 256"), std::string::npos) << msg.substr(msg.size() - 80);
    EXPECT_NE(msg.find("at position 256"), std::string::npos) << msg.substr(msg.size() - 80);
  }
  const std::string ok = std::string(256, '(') + "a" + std::string(256, ')');
  const CodePoints cps = decode_utf8("a", "test");
  EXPECT_EQ(Regex::compile(ok).match_at(cps.cps, 0), 1);
}

// Nested counts multiply: three levels of {1000} would be 10^9 instructions. Refused before
// they are allocated; two levels of {300} (90,000) still compile.
TEST(Regex, NestedRepetitionsPastTheProgramLimitAreRefused) {
  EXPECT_THROW(Regex::compile("((a{1000}){1000}){1000}"), RegexError);
  EXPECT_THROW(Regex::compile("(?:(?:ab){1,1000}){1000}"), RegexError);
  try {
    Regex::compile("(?:x{400}){400}");
    ADD_FAILURE() << "compiled";
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 100000 instructions"), std::string::npos)
        << e.what();
  }
  const Regex ok = Regex::compile("(?:x{300}){300}");
  const CodePoints cps = decode_utf8(std::string(90000, 'x'), "test");
  EXPECT_EQ(ok.match_at(cps.cps, 0), 90000);
}

TEST(Regex, CatastrophicBacktrackingIsRefused) {
  const Regex re = Regex::compile("(?:a|a)+b");
  const CodePoints cps = decode_utf8(std::string(40, 'a'), "test");
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  EXPECT_THROW(re.find_all(cps.cps, spans), RegexError);
}

}  // namespace
}  // namespace mn::io
