#pragma once
// UTF-8 decoding and encoding for the tokenizer: code points with their byte offsets, and the
// repair of invalid sequences the way Hugging Face's decoders (Rust from_utf8_lossy) do it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mn::io {

// Code points of valid UTF-8 with the byte offset of each (offsets has one more entry: the end).
struct CodePoints {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
};

// Throws FormatError naming `what` and the byte offset of the first invalid sequence.
CodePoints decode_utf8(std::string_view text, std::string_view what);

void append_utf8(std::string& out, char32_t cp);

// Length of the longest prefix of `bytes` that is valid UTF-8, or up to an incomplete sequence
// at the end that a following byte could still complete (that tail is not counted).
size_t complete_utf8_prefix(std::string_view bytes);

// `bytes` with every maximal invalid subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace mn::io
