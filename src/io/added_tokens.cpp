#include "io/added_tokens.h"

#include <algorithm>

#include "io/unicode.h"
#include "io/utf8.h"

namespace mn::io {
namespace {

// The code point ending just before `end` / starting at `begin` (0 at the edges).
char32_t cp_before(std::string_view t, size_t end) {
  if (end == 0) return 0;
  size_t b = end - 1;
  while (b > 0 && (static_cast<uint8_t>(t[b]) & 0xC0) == 0x80) --b;
  return decode_utf8(t.substr(b, end - b), "text").cps.at(0);
}
char32_t cp_at(std::string_view t, size_t begin) {
  if (begin >= t.size()) return 0;
  size_t e = begin + 1;
  while (e < t.size() && (static_cast<uint8_t>(t[e]) & 0xC0) == 0x80) ++e;
  return decode_utf8(t.substr(begin, e - begin), "text").cps.at(0);
}
size_t cp_len_before(std::string_view t, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<uint8_t>(t[b]) & 0xC0) == 0x80) --b;
  return end - b;
}
size_t cp_len_at(std::string_view t, size_t begin) {
  size_t e = begin + 1;
  while (e < t.size() && (static_cast<uint8_t>(t[e]) & 0xC0) == 0x80) ++e;
  return e - begin;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

bool AddedTokenMatcher::word_boundaries_ok(std::string_view text, size_t begin, size_t end) const {
  const char32_t before = cp_before(text, begin), after = cp_at(text, end);
  return !(before && is_word_char(before)) && !(after && is_word_char(after));
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, Match& m) const {
  for (size_t i = from; i < text.size(); ++i) {
    for (uint32_t k : by_first_byte_[static_cast<uint8_t>(text[i])]) {
      const AddedToken& t = tokens_[k];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      const size_t end = i + t.content.size();
      if (t.single_word && !word_boundaries_ok(text, i, end)) continue;
      m = {i, end, t.id};
      if (t.lstrip) {
        while (m.begin > from && is_white_space(cp_before(text, m.begin))) {
          m.begin -= cp_len_before(text, m.begin);
        }
      }
      if (t.rstrip) {
        while (m.end < text.size() && is_white_space(cp_at(text, m.end))) {
          m.end += cp_len_at(text, m.end);
        }
      }
      return true;
    }
  }
  return false;
}

void AddedTokenMatcher::split(std::string_view text,
                              const std::function<void(std::string_view)>& text_piece,
                              const std::function<void(int32_t)>& token) const {
  size_t pos = 0;
  Match m;
  while (!tokens_.empty() && find(text, pos, m)) {
    if (m.begin > pos) text_piece(text.substr(pos, m.begin - pos));
    token(m.id);
    pos = m.end;
  }
  if (pos < text.size()) text_piece(text.substr(pos));
}

}  // namespace mn::io
