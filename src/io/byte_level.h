#pragma once
// GPT-2's byte-level alphabet: every byte is spelled by one printable code point, so a
// vocabulary of strings covers arbitrary bytes (bytes_to_unicode in GPT-2's encoder.py).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mn::io {

// The code point that spells byte b.
char32_t byte_to_char(uint8_t b);
// The byte a code point spells, or nullopt for a code point outside the alphabet.
std::optional<uint8_t> char_to_byte(char32_t c);

// The byte-level spelling (UTF-8) of raw bytes.
std::string byte_level_encode(std::string_view bytes);
// The raw bytes of a byte-level spelling; a token with any code point outside the alphabet is
// kept as written, whole (as Hugging Face's ByteLevel decoder does, for added tokens mostly).
std::string byte_level_decode(std::string_view spelled);

}  // namespace mn::io
