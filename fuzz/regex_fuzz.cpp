// Pre-tokenizer regexes: a pattern, and when it compiles, its matches in a text. The input is
// the pattern, then a 0 byte and the text (valid UTF-8; otherwise a fixed sample).
#include <algorithm>

#include "harness.h"
#include "io/regex.h"
#include "io/utf8.h"

namespace mn::fuzz {
namespace {

constexpr std::string_view kSample =
    "Hello world's 123 numbers,\n  tabs\tand ünïcödé 東京 🙂!!";

void fuzz_regex(std::span<const uint8_t> data) {
  const std::string_view all = as_text(data);
  const size_t split = all.find('\0');
  const std::string_view pattern = all.substr(0, split);
  std::string_view text = split == std::string_view::npos ? kSample : all.substr(split + 1);
  parse_or_refuse([&] {
    const io::Regex re = io::Regex::compile(pattern);
    io::CodePoints cps;
    try {
      cps = io::decode_utf8(text, "fuzz text");
    } catch (const Error&) {
      cps = io::decode_utf8(kSample, "sample");
    }
    std::vector<std::pair<uint32_t, uint32_t>> matches;
    re.find_all(cps.cps, matches);
    uint32_t last = 0;
    for (const auto& [begin, end] : matches) {
      require(begin >= last && begin < end && end <= cps.cps.size(),
              "find_all: matches out of order or outside the text");
      last = end;
    }
    for (size_t pos = 0; pos <= std::min<size_t>(cps.cps.size(), 8); ++pos) {
      const int64_t end = re.match_at(cps.cps, pos);
      require(end == -1 ||
                  (end >= static_cast<int64_t>(pos) && end <= static_cast<int64_t>(cps.cps.size())),
              "match_at: an end outside the text");
    }
  });
}

const Registration registered("regex", fuzz_regex);

}  // namespace
}  // namespace mn::fuzz
