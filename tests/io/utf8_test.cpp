// UTF-8 repair as decoding needs it: each maximal invalid subpart becomes one U+FFFD (Unicode's
// recommended practice, Table 3-8, which Rust's from_utf8_lossy and Python's "replace" follow),
// and the prefix a stream can print without cutting a character.
#include <gtest/gtest.h>

#include <meganeura/error.h>

#include "io/utf8.h"

namespace mn::io {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xF1\x80\x80\xE1\x80\xC2"
                       "b\x80"
                       "c\x80\xBF"
                       "d"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), R + R + R);          // a surrogate
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), R + R);                  // overlong
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(utf8_lossy("\xE6\x97"), R);                      // cut at the end
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x91x"), "a" + R + "x");
  EXPECT_EQ(utf8_lossy("日本 👍🏽"), "日本 👍🏽");
}

TEST(Utf8, CompletePrefixHoldsBackOnlyAnIncompleteTail) {
  EXPECT_EQ(complete_utf8_prefix("ab\xE6\x97"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xE6\x97\xA5"), 5u);
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x91"), 0u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);
  EXPECT_EQ(complete_utf8_prefix("\xFF"), 1u);      // invalid: nothing can complete it
  EXPECT_EQ(complete_utf8_prefix("\xE0\x80"), 2u);  // E0 needs A0..BF next
}

TEST(Utf8, DecodeGivesCodePointsAndOffsets) {
  const CodePoints c = decode_utf8("aé日👍", "test");
  EXPECT_EQ(c.cps, (std::vector<char32_t>{U'a', U'é', U'日', U'👍'}));
  EXPECT_EQ(c.offsets, (std::vector<uint32_t>{0, 1, 3, 6, 10}));
  EXPECT_THROW(decode_utf8("a\xC3", "test"), FormatError);
  std::string s;
  for (char32_t cp : c.cps) append_utf8(s, cp);
  EXPECT_EQ(s, "aé日👍");
}

}  // namespace
}  // namespace mn::io
