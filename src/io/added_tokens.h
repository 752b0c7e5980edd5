#pragma once
// Added tokens (special tokens and the like) found whole in text before any other processing:
// leftmost match first, the longest at that position, with the single_word, lstrip and rstrip
// rules of Hugging Face's AddedVocabulary.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mn::io {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // Calls `text_piece` for each stretch between matches (non-empty) and `token` for each match,
  // in order.
  void split(std::string_view text, const std::function<void(std::string_view)>& text_piece,
             const std::function<void(int32_t)>& token) const;

 private:
  struct Match {
    size_t begin, end;  // the bytes the token consumes, stripped whitespace included
    int32_t id;
  };
  bool find(std::string_view text, size_t from, Match& m) const;
  bool word_boundaries_ok(std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices, longest content first
};

}  // namespace mn::io
