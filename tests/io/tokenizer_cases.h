#pragma once
// The fixture tokenizers and the expectations Hugging Face `tokenizers` produced for them
// (tests/fixtures/lm/make_tokenizer_cases.py).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mn::test {

inline std::filesystem::path lm_fixtures() {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm";
}

inline std::filesystem::path tokenizer_dir(const std::string& style) {
  return lm_fixtures() / "tokenizers" / style;
}

inline const nlohmann::json& tokenizer_cases() {
  static const nlohmann::json cases = [] {
    std::ifstream f(lm_fixtures() / "tokenizer_cases.json", std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return nlohmann::json::parse(s.str());
  }();
  return cases;
}

inline std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace mn::test
