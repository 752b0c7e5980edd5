// Reading the first N samples of an IDX file reads only those: a file that declares far more
// images than it holds (or than N) loads its first N, and the declared counts are still checked.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <meganeura/data.h>
#include <meganeura/error.h>

#include "data/test_util.h"

namespace mn {
namespace {

using test::expect_format_error;
using test::gzip;
using test::ScratchDir;
using test::write_bytes;

// An IDX header for u8 data of `dims`, followed by `content` bytes of a counting pattern.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, size_t content) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  }
  for (size_t i = 0; i < content; ++i) b.push_back(static_cast<uint8_t>(i * 7 % 10));
  return b;
}

constexpr uint32_t kDeclared = 2'000'000;  // 1.5 GiB of 28x28 images, were they all read

TEST(IdxLimit, ReadsOnlyTheRowsAskedFor) {
  ScratchDir dir;
  const auto path = dir / "images.gz";
  write_bytes(path, gzip(idx_bytes({kDeclared, 28, 28}, 100 * 784)));  // holds 100 images
  RawTensor t = read_idx(path, 64);
  EXPECT_EQ(t.shape, (Shape{64, 28, 28}));
  ASSERT_EQ(t.bytes.size(), size_t{64 * 784});
  for (size_t i = 0; i < t.bytes.size(); ++i) ASSERT_EQ(t.bytes[i], i * 7 % 10) << i;
  // Read in full, the same file declares more than its compressed size can expand to: refused
  // before any data is allocated or decompressed.
  expect_format_error([&] { read_idx(path); },
                      {"need 1568000000 data bytes", "decompresses to at most"});
  expect_format_error([&] { read_idx(path, 1'000'000); },
                      {"for the first 1000000 rows", "decompresses to at most"});
  // Within that bound, a short content is found while reading.
  write_bytes(dir / "short.gz", gzip(idx_bytes({200, 28, 28}, 100 * 784)));
  expect_format_error([&] { read_idx(dir / "short.gz"); }, {"truncated", "ends at byte"});
  // A limit above the declared count reads everything there is.
  write_bytes(dir / "small.gz", gzip(idx_bytes({5, 2}, 10)));
  EXPECT_EQ(read_idx(dir / "small.gz", 1000).shape, (Shape{5, 2}));
  EXPECT_THROW(read_idx(dir / "small.gz", 0), Error);
}

// Uncompressed, the file size is known: a declared size beyond it fails before any data read.
TEST(IdxLimit, PlainFileShorterThanDeclaredFailsEvenWithALimit) {
  ScratchDir dir;
  write_bytes(dir / "images", idx_bytes({kDeclared, 28, 28}, 100 * 784));
  expect_format_error([&] { read_idx(dir / "images", 64); }, {"need 1568000000", "the file has"});
}

TEST(IdxLimit, LoadsTheFirstSamplesAndChecksDeclaredCounts) {
  ScratchDir dir;
  write_bytes(dir / "img.gz", gzip(idx_bytes({kDeclared, 28, 28}, 100 * 784)));
  write_bytes(dir / "lab.gz", gzip(idx_bytes({kDeclared}, 100)));
  Dataset d = load_idx_images(dir / "img.gz", dir / "lab.gz", ImageLayout::flat, {}, 64);
  EXPECT_EQ(d.size(), 64);
  EXPECT_EQ(d.labels[9], 63 % 10);
  EXPECT_FLOAT_EQ(d.inputs[3], 1.0f / 255.0f * (3 * 7 % 10));

  write_bytes(dir / "lab.gz", gzip(idx_bytes({kDeclared - 1}, 100)));
  expect_format_error(
      [&] { load_idx_images(dir / "img.gz", dir / "lab.gz", ImageLayout::flat, {}, 64); },
      {"1999999 labels for the 2000000 images"});
}

}  // namespace
}  // namespace mn
