#pragma once
// The text of one generated sequence as it grows: what may be shown so far, and where a stop
// string ends it.
#include <string>
#include <string_view>
#include <vector>

namespace mn::gen {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop_strings);

  // `decoded` is the text of every token generated so far. Returns the text that became final
  // since the last call: it never ends inside a UTF-8 character (the decoder's U+FFFD for a
  // character whose bytes are still coming counts as unfinished) nor in a prefix of a stop
  // string; with `last`, everything left is final.
  std::string update(std::string_view decoded, bool last);
  bool stopped() const { return stopped_; }
  // The final text so far (cut before a stop string once one appeared).
  const std::string& text() const { return text_; }

 private:
  size_t held_back(std::string_view decoded) const;
  std::vector<std::string> stops_;
  std::string text_;
  bool stopped_ = false;
};

// Bytes at the end of `s` that begin a UTF-8 character whose continuation bytes are missing.
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace mn::gen
