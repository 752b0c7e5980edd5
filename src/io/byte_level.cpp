#include "io/byte_level.h"

#include "io/utf8.h"

namespace mn::io {
namespace {

// Printable Latin-1 bytes spell themselves; the others take code points 256, 257, ... in order.
struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> spelled;
  Tables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(spelled[b], to_char[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

std::optional<uint8_t> char_to_byte(char32_t c) {
  if (c < 256) {
    const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
    if (printable) return static_cast<uint8_t>(c);
    return std::nullopt;
  }
  if (c < 256 + 68) {  // 68 bytes are not printable: 0-32, 127-160, 173
    for (int b = 0; b < 256; ++b) {
      if (tables().to_char[b] == c) return static_cast<uint8_t>(b);
    }
  }
  return std::nullopt;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += tables().spelled[static_cast<uint8_t>(c)];
  return out;
}

std::string byte_level_decode(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  for (char32_t c : decode_utf8(spelled, "byte-level token").cps) {
    auto b = char_to_byte(c);
    if (!b) return std::string(spelled);
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace mn::io
