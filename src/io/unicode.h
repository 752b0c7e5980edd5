#pragma once
// The Unicode properties the pre-tokenizer regexes ask about, and NFC normalization (from ICU).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mn::io {

// A set of general categories as a bit mask (bit i = ICU's UCharCategory i).
using CategoryMask = uint32_t;

// \p{L}, \p{Lu}, \p{Letter}, \p{N}, \p{P}... (one- and two-letter names and the long names of
// the one-letter groups); nullopt for a name that is not a general category.
std::optional<CategoryMask> category_mask(std::string_view name);

CategoryMask category_bit(char32_t cp);
// Unicode White_Space, what \s means in the regex engines Hugging Face uses.
bool is_white_space(char32_t cp);
bool is_decimal_digit(char32_t cp);  // \d: Nd
bool is_word_char(char32_t cp);      // \w: letters, marks, digits, connector punctuation
// Simple case folding, for (?i).
char32_t fold_case(char32_t cp);
// Simple (one code point) upper and lower case mappings.
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);

// NFC of valid UTF-8.
std::string nfc(std::string_view text);

}  // namespace mn::io
