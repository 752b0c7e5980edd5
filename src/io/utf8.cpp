#include "io/utf8.h"

#include <meganeura/error.h>

namespace mn::io {
namespace {

enum class Seq { ok, incomplete, invalid };

// The sequence starting at b[i]: valid (len bytes), a valid prefix cut by the end of the input
// (len bytes so far), or invalid (len = its maximal invalid subpart, at least 1).
struct SeqInfo {
  Seq status;
  size_t len;
};

SeqInfo sequence_at(std::string_view b, size_t i) {
  const auto c0 = static_cast<uint8_t>(b[i]);
  if (c0 < 0x80) return {Seq::ok, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the range allowed for the second byte
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 3;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 4;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;
  } else {
    return {Seq::invalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= b.size()) return {Seq::incomplete, k};
    const auto c = static_cast<uint8_t>(b[i + k]);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return {Seq::invalid, k};
  }
  return {Seq::ok, need};
}

char32_t decode_at(std::string_view b, size_t i, size_t len) {
  const auto c0 = static_cast<uint8_t>(b[i]);
  if (len == 1) return c0;
  char32_t cp = c0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(b[i + k]) & 0x3F);
  return cp;
}

}  // namespace

CodePoints decode_utf8(std::string_view text, std::string_view what) {
  CodePoints out;
  out.cps.reserve(text.size());
  out.offsets.reserve(text.size() + 1);
  size_t i = 0;
  while (i < text.size()) {
    const auto c0 = static_cast<uint8_t>(text[i]);
    if (c0 < 0x80) {
      out.cps.push_back(c0);
      out.offsets.push_back(static_cast<uint32_t>(i));
      ++i;
      continue;
    }
    const SeqInfo s = sequence_at(text, i);
    if (s.status != Seq::ok) {
      throw FormatError(std::string(what) + ": invalid UTF-8 at byte " + std::to_string(i));
    }
    out.cps.push_back(decode_at(text, i, s.len));
    out.offsets.push_back(static_cast<uint32_t>(i));
    i += s.len;
  }
  out.offsets.push_back(static_cast<uint32_t>(text.size()));
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t complete_utf8_prefix(std::string_view b) {
  size_t i = 0;
  while (i < b.size()) {
    const SeqInfo s = sequence_at(b, i);
    if (s.status == Seq::incomplete) return i;
    i += s.len;  // an invalid subpart is complete too: it can only become U+FFFD
  }
  return i;
}

std::string utf8_lossy(std::string_view b) {
  std::string out;
  out.reserve(b.size());
  size_t i = 0;
  while (i < b.size()) {
    const SeqInfo s = sequence_at(b, i);
    if (s.status == Seq::ok) {
      out.append(b.substr(i, s.len));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += s.len;
  }
  return out;
}

}  // namespace mn::io
