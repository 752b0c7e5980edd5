#include "io/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>

#include <meganeura/error.h>

namespace mn::io {
namespace {

constexpr CategoryMask bit(UCharCategory c) { return CategoryMask{1} << c; }

struct NamedMask {
  std::string_view name;
  CategoryMask mask;
};

CategoryMask letters() {
  return bit(U_UPPERCASE_LETTER) | bit(U_LOWERCASE_LETTER) | bit(U_TITLECASE_LETTER) |
         bit(U_MODIFIER_LETTER) | bit(U_OTHER_LETTER);
}
CategoryMask marks() {
  return bit(U_NON_SPACING_MARK) | bit(U_ENCLOSING_MARK) | bit(U_COMBINING_SPACING_MARK);
}
CategoryMask numbers() {
  return bit(U_DECIMAL_DIGIT_NUMBER) | bit(U_LETTER_NUMBER) | bit(U_OTHER_NUMBER);
}
CategoryMask punctuation() {
  return bit(U_DASH_PUNCTUATION) | bit(U_START_PUNCTUATION) | bit(U_END_PUNCTUATION) |
         bit(U_CONNECTOR_PUNCTUATION) | bit(U_OTHER_PUNCTUATION) | bit(U_INITIAL_PUNCTUATION) |
         bit(U_FINAL_PUNCTUATION);
}
CategoryMask symbols() {
  return bit(U_MATH_SYMBOL) | bit(U_CURRENCY_SYMBOL) | bit(U_MODIFIER_SYMBOL) | bit(U_OTHER_SYMBOL);
}
CategoryMask separators() {
  return bit(U_SPACE_SEPARATOR) | bit(U_LINE_SEPARATOR) | bit(U_PARAGRAPH_SEPARATOR);
}
CategoryMask others() {
  return bit(U_CONTROL_CHAR) | bit(U_FORMAT_CHAR) | bit(U_PRIVATE_USE_CHAR) | bit(U_SURROGATE) |
         bit(U_GENERAL_OTHER_TYPES);
}

const std::array<NamedMask, 52>& named_masks() {
  static const std::array<NamedMask, 52> table = {{
      {"L", letters()},
      {"Letter", letters()},
      {"Lu", bit(U_UPPERCASE_LETTER)},
      {"Ll", bit(U_LOWERCASE_LETTER)},
      {"Lt", bit(U_TITLECASE_LETTER)},
      {"Lm", bit(U_MODIFIER_LETTER)},
      {"Lo", bit(U_OTHER_LETTER)},
      {"LC", bit(U_UPPERCASE_LETTER) | bit(U_LOWERCASE_LETTER) | bit(U_TITLECASE_LETTER)},
      {"M", marks()},
      {"Mark", marks()},
      {"Mn", bit(U_NON_SPACING_MARK)},
      {"Mc", bit(U_COMBINING_SPACING_MARK)},
      {"Me", bit(U_ENCLOSING_MARK)},
      {"N", numbers()},
      {"Number", numbers()},
      {"Nd", bit(U_DECIMAL_DIGIT_NUMBER)},
      {"Nl", bit(U_LETTER_NUMBER)},
      {"No", bit(U_OTHER_NUMBER)},
      {"P", punctuation()},
      {"Punctuation", punctuation()},
      {"Pd", bit(U_DASH_PUNCTUATION)},
      {"Ps", bit(U_START_PUNCTUATION)},
      {"Pe", bit(U_END_PUNCTUATION)},
      {"Pc", bit(U_CONNECTOR_PUNCTUATION)},
      {"Po", bit(U_OTHER_PUNCTUATION)},
      {"Pi", bit(U_INITIAL_PUNCTUATION)},
      {"Pf", bit(U_FINAL_PUNCTUATION)},
      {"S", symbols()},
      {"Symbol", symbols()},
      {"Sm", bit(U_MATH_SYMBOL)},
      {"Sc", bit(U_CURRENCY_SYMBOL)},
      {"Sk", bit(U_MODIFIER_SYMBOL)},
      {"So", bit(U_OTHER_SYMBOL)},
      {"Z", separators()},
      {"Separator", separators()},
      {"Zs", bit(U_SPACE_SEPARATOR)},
      {"Zl", bit(U_LINE_SEPARATOR)},
      {"Zp", bit(U_PARAGRAPH_SEPARATOR)},
      {"C", others()},
      {"Other", others()},
      {"Cc", bit(U_CONTROL_CHAR)},
      {"Cf", bit(U_FORMAT_CHAR)},
      {"Co", bit(U_PRIVATE_USE_CHAR)},
      {"Cs", bit(U_SURROGATE)},
      {"Cn", bit(U_GENERAL_OTHER_TYPES)},
      {"Lowercase_Letter", bit(U_LOWERCASE_LETTER)},
      {"Uppercase_Letter", bit(U_UPPERCASE_LETTER)},
      {"Decimal_Number", bit(U_DECIMAL_DIGIT_NUMBER)},
      {"Nonspacing_Mark", bit(U_NON_SPACING_MARK)},
      {"Space_Separator", bit(U_SPACE_SEPARATOR)},
      {"Control", bit(U_CONTROL_CHAR)},
      {"Format", bit(U_FORMAT_CHAR)},
  }};
  return table;
}

}  // namespace

std::optional<CategoryMask> category_mask(std::string_view name) {
  for (const auto& n : named_masks()) {
    if (n.name == name) return n.mask;
  }
  return std::nullopt;
}

CategoryMask category_bit(char32_t cp) {
  return CategoryMask{1} << u_charType(static_cast<UChar32>(cp));
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool is_decimal_digit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return u_charType(static_cast<UChar32>(cp)) == U_DECIMAL_DIGIT_NUMBER;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  return (category_bit(cp) &
          (letters() | marks() | bit(U_DECIMAL_DIGIT_NUMBER) | bit(U_CONNECTOR_PUNCTUATION))) != 0;
}

char32_t fold_case(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<char32_t>(u_foldCase(static_cast<UChar32>(cp), U_FOLD_CASE_DEFAULT));
}

char32_t to_upper(char32_t cp) {
  return static_cast<char32_t>(u_toupper(static_cast<UChar32>(cp)));
}
char32_t to_lower(char32_t cp) {
  return static_cast<char32_t>(u_tolower(static_cast<UChar32>(cp)));
}

std::string nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(text);  // ASCII is its own NFC
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err))
    throw Error(std::string("NFC: ICU normalizer unavailable: ") + u_errorName(err));
  icu::UnicodeString in = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (norm->isNormalized(in, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  icu::UnicodeString out = norm->normalize(in, err);
  if (U_FAILURE(err)) throw Error(std::string("NFC: normalization failed: ") + u_errorName(err));
  std::string result;
  out.toUTF8String(result);
  return result;
}

}  // namespace mn::io
