// Every fuzz harness (fuzz/<parser>_fuzz.cpp) over its seed corpus fuzz/corpus/<parser>/, in
// the normal build: the seeds and every input that once crashed a parser stay tests, also
// where clang's libFuzzer is not installed. A harness fails by aborting (a broken invariant) or
// by an exception other than mn::Error, which this test reports with the input's name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "harness.h"

namespace mn {
namespace {

namespace fs = std::filesystem;

TEST(FuzzCorpus, EveryHarnessAcceptsOrRefusesItsCorpus) {
  const fs::path corpus = fs::path(MN_SOURCE_DIR) / "fuzz" / "corpus";
  ASSERT_GE(fuzz::harnesses().size(), 8u);
  for (const auto& [parser, harness] : fuzz::harnesses()) {
    SCOPED_TRACE(parser);
    const fs::path dir = corpus / parser;
    ASSERT_TRUE(fs::is_directory(dir)) << dir << ": every harness has a seed corpus";
    size_t inputs = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      std::ifstream f(e.path(), std::ios::binary);
      const std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)),
                                      std::istreambuf_iterator<char>());
      try {
        harness(data);
      } catch (const std::exception& ex) {
        ADD_FAILURE() << e.path() << ": " << ex.what();
      }
      ++inputs;
    }
    EXPECT_GT(inputs, 0u) << dir;
  }
}

}  // namespace
}  // namespace mn
