#include "generate/text_stream.h"

#include <algorithm>

namespace mn::gen {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

size_t incomplete_utf8_tail(std::string_view s) {
  // Look back over at most three continuation bytes for the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

TextStream::TextStream(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

size_t TextStream::held_back(std::string_view decoded) const {
  size_t hold = incomplete_utf8_tail(decoded);
  if (hold == 0 && decoded.ends_with(kReplacement)) hold = kReplacement.size();
  // The longest end of the text that a stop string could still complete.
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, decoded.size()); k > hold; --k) {
      if (decoded.substr(decoded.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string TextStream::update(std::string_view decoded, bool last) {
  if (stopped_) return {};
  size_t end = decoded.size();
  for (const std::string& stop : stops_) {
    const size_t at = decoded.find(stop);
    if (at != std::string_view::npos && at < end) {
      end = at;
      stopped_ = true;
    }
  }
  if (!stopped_ && !last) end -= std::min(end, held_back(decoded));
  // Text once shown is never taken back: the decoder's output only grows at the end.
  if (end <= text_.size()) return {};
  std::string fresh(decoded.substr(text_.size(), end - text_.size()));
  text_.append(fresh);
  return fresh;
}

}  // namespace mn::gen
