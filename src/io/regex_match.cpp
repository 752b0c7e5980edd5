// The backtracking matcher: leftmost-first (Perl/Oniguruma) semantics over code points.
#include "io/regex.h"

#include <meganeura/tokenizer.h>

namespace mn::io {

bool CharClass::contains(char32_t c) const {
  for (const auto& [lo, hi] : ranges) {
    if (c >= lo && c <= hi) return true;
  }
  if (categories || not_categories) {
    const CategoryMask b = category_bit(c);
    if (categories & b) return true;
    if (not_categories && !(not_categories & b)) return true;
  }
  if (space || not_space) {
    const bool ws = is_white_space(c);
    if ((space && ws) || (not_space && !ws)) return true;
  }
  if (digit || not_digit) {
    const bool d = is_decimal_digit(c);
    if ((digit && d) || (not_digit && !d)) return true;
  }
  if (word || not_word) {
    const bool w = is_word_char(c);
    if ((word && w) || (not_word && !w)) return true;
  }
  return false;
}

bool CharClass::slow_matches(char32_t c) const {
  bool in = contains(c);
  if (!in && fold) {
    // Under (?i) a class accepts a character whose case variants it holds ([A-Z] takes 'k' and
    // the Kelvin sign, whose folding is 'k').
    const char32_t f = fold_case(c);
    in = contains(f) || contains(to_upper(c)) || contains(to_lower(c)) || contains(to_upper(f));
  }
  return in != negated;
}

void CharClass::finish() {
  ascii[0] = ascii[1] = 0;
  for (char32_t c = 0; c < 128; ++c) {
    bool in = contains(c);
    if (!in && fold && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
      in = contains(c ^ 0x20);  // the other case of an ASCII letter
    }
    if (in != negated) ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
}

namespace {

struct Thread {
  uint32_t pc;
  uint32_t pos;
};

class Matcher {
 public:
  Matcher(const Regex& re, const std::vector<RegexInst>& prog,
          const std::vector<CharClass>& classes, std::span<const char32_t> text)
      : re_(re),
        prog_(prog),
        classes_(classes),
        t_(text),
        // Tokenizer patterns backtrack a bounded amount per character; a pattern that needs far
        // more (nested quantifiers on a hostile text) is refused instead of hanging.
        budget_(1'000'000 + 1'000 * static_cast<uint64_t>(text.size())) {}

  // End of the match of the program starting at `pc` from `pos`, or -1.
  int64_t run(uint32_t pc, uint32_t pos) {
    using Op = RegexInst::Op;
    const size_t base = stack_.size();
    const uint32_t n = static_cast<uint32_t>(t_.size());
    while (true) {
      if (--budget_ == 0) {
        throw RegexError("regex \"" + re_.pattern() +
                         "\": backtracking limit exceeded at text position " + std::to_string(pos));
      }
      const RegexInst& in = prog_[pc];
      bool ok = true;
      switch (in.op) {
        case Op::character:
          ok = pos < n && t_[pos] == in.x;
          break;
        case Op::character_fold:
          ok = pos < n && fold_case(t_[pos]) == in.x;
          break;
        case Op::klass:
          ok = pos < n && classes_[in.x].matches(t_[pos]);
          break;
        case Op::any:
          ok = pos < n && t_[pos] != '\n';
          break;
        case Op::begin:
          ok = pos == 0;
          break;
        case Op::end:
          ok = pos == n;
          break;
        case Op::split:
          stack_.push_back({in.y, pos});
          pc = in.x;
          continue;
        case Op::jump:
          pc = in.x;
          continue;
        case Op::match:
          stack_.resize(base);
          return pos;
        case Op::lookahead:
        case Op::negative_lookahead: {
          const bool found = run(pc + 1, pos) >= 0;
          if (found == (in.op == Op::lookahead)) {
            pc = in.x;
            continue;
          }
          ok = false;
          break;
        }
        case Op::atomic: {
          const int64_t end = run(pc + 1, pos);
          if (end >= 0) {
            pos = static_cast<uint32_t>(end);
            pc = in.x;
            continue;
          }
          ok = false;
          break;
        }
      }
      if (ok) {  // the consuming instructions
        ++pc, ++pos;
        if (in.op == Op::begin || in.op == Op::end) --pos;
        continue;
      }
      if (stack_.size() == base) return -1;
      pc = stack_.back().pc;
      pos = stack_.back().pos;
      stack_.pop_back();
    }
  }

 private:
  const Regex& re_;
  const std::vector<RegexInst>& prog_;
  const std::vector<CharClass>& classes_;
  std::span<const char32_t> t_;
  uint64_t budget_;
  std::vector<Thread> stack_;
};

}  // namespace

int64_t Regex::match_at(std::span<const char32_t> text, size_t pos) const {
  Matcher m(*this, prog_, classes_, text);
  return m.run(0, static_cast<uint32_t>(pos));
}

void Regex::find_all(std::span<const char32_t> text,
                     std::vector<std::pair<uint32_t, uint32_t>>& out) const {
  Matcher m(*this, prog_, classes_, text);
  uint32_t pos = 0;
  const auto n = static_cast<uint32_t>(text.size());
  while (pos < n) {
    const int64_t end = m.run(0, pos);
    if (end > pos) {
      out.emplace_back(pos, static_cast<uint32_t>(end));
      pos = static_cast<uint32_t>(end);
    } else {
      ++pos;
    }
  }
}

}  // namespace mn::io
