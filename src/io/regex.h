#pragma once
// A small backtracking regex engine over Unicode code points for the pre-tokenizer patterns of
// Hugging Face tokenizers (which run them with Oniguruma, leftmost-first like this engine):
// alternation, (?:) (?i:) (?i) groups (capturing groups match as non-capturing), lookahead
// (?= ) (?! ), atomic groups (?> ), classes with ranges, negation, \p{..} \P{..} \s \S \d \D
// \w \W, the escapes \r \n \t \f \v \xHH \x{H..} \uHHHH, '.', ^ $, and the quantifiers
// ? * + {m} {m,} {m,n}, greedy, lazy (?) or possessive (+). Anything else is a RegexError naming
// the pattern and the position.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/unicode.h"

namespace mn::io {

struct CharClass {
  bool negated = false;
  bool fold = false;  // case-insensitive
  std::vector<std::pair<char32_t, char32_t>> ranges;
  CategoryMask categories = 0;      // \p{..}
  CategoryMask not_categories = 0;  // \P{..} inside a class: any code point outside them
  bool space = false, not_space = false, digit = false, not_digit = false, word = false,
       not_word = false;
  uint64_t ascii[2] = {0, 0};  // membership of code points < 128, with negation and folding

  void finish();  // fills `ascii`; call once the items are in
  bool matches(char32_t c) const {
    if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1;
    return slow_matches(c);
  }
  bool contains(char32_t c) const;  // the items alone: no negation, no folding

 private:
  bool slow_matches(char32_t c) const;
};

struct RegexInst {
  enum class Op : uint8_t {
    character,
    character_fold,
    klass,
    any,
    split,
    jump,
    match,
    lookahead,
    negative_lookahead,
    atomic,
    begin,
    end
  };
  Op op;
  uint32_t x = 0;  // character, class index, first target, or continuation
  uint32_t y = 0;  // second target of split
};

class Regex {
 public:
  // Throws RegexError naming the pattern and the position of the problem.
  static Regex compile(std::string_view pattern);

  // Non-overlapping leftmost-first matches, as [begin, end) code point indices; a search
  // continues after each match, and one character further after an empty match (not reported).
  void find_all(std::span<const char32_t> text,
                std::vector<std::pair<uint32_t, uint32_t>>& out) const;
  // The end of the match that starts at `pos`, or -1.
  int64_t match_at(std::span<const char32_t> text, size_t pos) const;

  const std::string& pattern() const { return pattern_; }

 private:
  friend class RegexCompiler;
  std::string pattern_;
  std::vector<RegexInst> prog_;
  std::vector<CharClass> classes_;
};

}  // namespace mn::io
