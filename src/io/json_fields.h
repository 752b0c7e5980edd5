#pragma once
// Typed access to the fields of a JSON object read from a file, with errors naming the file and
// the field (mn::FormatError).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mn::io {

// The whole content of a text file; FormatError naming it when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

class JsonFields {
 public:
  // Parses `text`; FormatError naming `file` when it is not a JSON object.
  JsonFields(const std::string& text, std::string file);
  JsonFields(nlohmann::json object, std::string file, std::string prefix);

  const std::string& file() const { return file_; }
  const nlohmann::json& object() const { return j_; }
  // Present and not null.
  bool has(const std::string& key) const;

  int64_t required_int(const std::string& key) const;
  std::optional<int64_t> optional_int(const std::string& key) const;
  std::optional<double> optional_number(const std::string& key) const;
  std::optional<bool> optional_bool(const std::string& key) const;
  std::optional<std::string> optional_string(const std::string& key) const;
  // An integer or a list of integers (token ids); empty when absent or null.
  std::vector<int64_t> int_or_list(const std::string& key) const;
  // A nested object; nullopt when absent or null.
  std::optional<JsonFields> optional_object(const std::string& key) const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json* find(const std::string& key) const;
  int64_t as_int(const std::string& key, const nlohmann::json& v) const;

  nlohmann::json j_;
  std::string file_;
  std::string prefix_;  // "rope_scaling." for nested objects
};

// A size field in [1, 2^31 - 1] (token ids, positions and kernel indices are 32-bit), `fallback`
// when absent; FormatError naming the field when missing without a fallback or out of range.
int64_t positive_size(const JsonFields& f, const std::string& key,
                      std::optional<int64_t> fallback = std::nullopt);

}  // namespace mn::io
