// IDX files (plain or gzip): the header, a full read, and a read of the first rows.
#include <meganeura/data.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

void check(const RawTensor& t) {
  require(t.bytes.size() == static_cast<size_t>(t.numel()) * elem_type_size(t.type),
          "read_idx: the bytes do not hold the shape");
}

void fuzz_idx(std::span<const uint8_t> data) {
  const MemoryFile file(data);
  parse_or_refuse([&] { read_idx_info(file.path()); });
  parse_or_refuse([&] { check(read_idx(file.path())); });
  parse_or_refuse([&] {
    const RawTensor t = read_idx(file.path(), 2);
    check(t);
    require(t.shape.empty() || t.shape[0] <= 2, "read_idx: more rows than the limit");
  });
}

const Registration registered("idx", fuzz_idx);

}  // namespace
}  // namespace mn::fuzz
