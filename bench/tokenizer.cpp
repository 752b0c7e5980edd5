// Single-threaded encoding speed of the byte-level BPE tokenizer, in MB/s of UTF-8 input, on the
// same tokenizer and text as bench/tokenizer.py (which makes the 32000-token vocabulary with
// --make-vocab). Each timed pass loads the tokenizer afresh, so its word cache starts empty, and
// encodes every line of the text, then (mb_per_s_whole_text_median) the whole text in one call;
// loads are not timed. The ids are checked to decode back to the text.
//
// Usage: bench_tokenizer [--tokenizer DIR] [--text FILE] [--repeats N]
//   defaults: build/bench-tokenizer, the licenses in /usr/share/common-licenses joined, 5
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/tokenizer.h>

#include "bench_util.h"

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string default_text() {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator("/usr/share/common-licenses")) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += read_file(f);
  return text;
}

std::vector<std::string_view> split_lines(const std::string& text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string::npos ? text.size() : nl + 1;
    lines.push_back(std::string_view(text).substr(start, end - start));
    start = end;
  }
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = "build/bench-tokenizer", text_file;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer") && i + 1 < argc)
      dir = argv[++i];
    else if (!std::strcmp(argv[i], "--text") && i + 1 < argc)
      text_file = argv[++i];
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: bench_tokenizer [--tokenizer DIR] [--text FILE] [--repeats N]\n");
      return 2;
    }
  }
  try {
    const std::string text = text_file.empty() ? default_text() : read_file(text_file);
    const auto lines = split_lines(text);
    std::vector<double> mb_per_s, mb_per_s_whole;
    size_t tokens = 0;
    int32_t vocab = 0;
    for (int r = 0; r < repeats; ++r) {
      const mn::Tokenizer tok = mn::Tokenizer::from_file(dir / "tokenizer.json");
      vocab = tok.vocab_size();
      std::vector<std::vector<int32_t>> ids(lines.size());
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < lines.size(); ++i) ids[i] = tok.encode(lines[i], false);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      mb_per_s.push_back(static_cast<double>(text.size()) / 1e6 / s);
      tokens = 0;
      std::string back;
      for (const auto& v : ids) {
        tokens += v.size();
        back += tok.decode(v);
      }
      const mn::Tokenizer fresh = mn::Tokenizer::from_file(dir / "tokenizer.json");
      const auto t1 = std::chrono::steady_clock::now();
      const std::vector<int32_t> whole = fresh.encode(text, false);
      const double s1 =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      mb_per_s_whole.push_back(static_cast<double>(text.size()) / 1e6 / s1);
      if (fresh.decode(whole) != text)
        throw mn::Error("bench_tokenizer: whole-text round trip differs");
      if (back != text)
        throw mn::Error("bench_tokenizer: decode(encode(text)) differs from the text");
    }
    nlohmann::json j = {{"implementation", "meganeura"},
                        {"vocab_size", vocab},
                        {"text_bytes", text.size()},
                        {"tokens", tokens},
                        {"mb_per_s_median", mn::bench::median(mb_per_s)},
                        {"mb_per_s_max", *std::max_element(mb_per_s.begin(), mb_per_s.end())},
                        {"mb_per_s_whole_text_median", mn::bench::median(mb_per_s_whole)}};
    std::printf("%s\n", j.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
}
