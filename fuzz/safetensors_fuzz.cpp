// safetensors files: the header (names, dtypes, shapes, offsets, metadata) and every tensor's
// bytes and values.
#include <meganeura/data.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

void fuzz_safetensors(std::span<const uint8_t> data) {
  parse_or_refuse([&] {
    const SafetensorsReader r =
        SafetensorsReader::from_bytes(std::vector<uint8_t>(data.begin(), data.end()), "fuzz");
    for (const SafetensorsEntry& e : r.entries()) {
      require(r.contains(e.name), "safetensors: an entry that is not contained");
      parse_or_refuse([&] {
        const RawTensor t = r.raw(e.name);
        require(t.bytes.size() == static_cast<size_t>(t.numel()) * elem_type_size(t.type),
                "safetensors: the bytes do not hold the shape");
      });
      parse_or_refuse([&] { require(r.array(e.name).shape == e.shape, "safetensors: shape"); });
    }
  });
}

const Registration registered("safetensors", fuzz_safetensors);

}  // namespace
}  // namespace mn::fuzz
