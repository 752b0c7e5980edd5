#pragma once
// A fuzz harness feeds one parser arbitrary bytes. mn::Error (FormatError, ShapeError...) is a
// parser's answer to bad input; anything else is a bug: another exception, a crash, a
// sanitizer report, a hang, an allocation far beyond the input, or a parsed result that breaks
// its own invariants (require()).
//
// Each fuzz/<parser>_fuzz.cpp registers one harness. Built with MN_BUILD_FUZZERS, each becomes
// the libFuzzer binary fuzz_<parser> (libfuzzer_main.cpp); in the normal test suite, every
// harness replays its seed corpus fuzz/corpus/<parser>/ (tests/fuzz/corpus_test.cpp), so an
// input that once crashed a parser stays a test.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include <meganeura/error.h>

namespace mn::fuzz {

using Harness = void (*)(std::span<const uint8_t> data);

// Every registered harness by parser name.
const std::map<std::string, Harness>& harnesses();

// Registers `harness` under `parser` at static initialization:
//   const Registration registered("idx", fuzz_idx);
struct Registration {
  Registration(const char* parser, Harness harness);
};

// Runs `parse`, taking mn::Error as the parser refusing its input.
template <class F>
void parse_or_refuse(F&& parse) {
  try {
    parse();
  } catch (const Error&) {  // NOLINT(bugprone-empty-catch): refusing bad input is correct
  }
}

// Aborts with `what` when a parsed result breaks an invariant.
void require(bool ok, const char* what);

// `data` as a file in memory (memfd), for parsers that read paths.
class MemoryFile {
 public:
  explicit MemoryFile(std::span<const uint8_t> data);
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::filesystem::path path() const;

 private:
  int fd_ = -1;
};

inline std::string_view as_text(std::span<const uint8_t> data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

}  // namespace mn::fuzz
