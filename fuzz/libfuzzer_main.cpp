// The libFuzzer entry point of a fuzz_<parser> binary, which links exactly one harness.
#include <cstddef>
#include <cstdint>

#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& all = mn::fuzz::harnesses();
  mn::fuzz::require(all.size() == 1, "a fuzzer binary links exactly one harness");
  all.begin()->second(std::span<const uint8_t>(data, size));
  return 0;
}
