#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <meganeura/data.h>
#include <meganeura/error.h>

#include "data/test_util.h"

namespace mn {
namespace {

using test::expect_format_error;
using test::gzip;
using test::ScratchDir;
using test::write_bytes;

std::vector<double> sample_values(ElemType t, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case ElemType::u8:
        v[i] = static_cast<double>((i * 37) % 256);
        break;
      case ElemType::i8:
        v[i] = static_cast<double>((i * 37) % 256 - 128);
        break;
      case ElemType::i16:
        v[i] = static_cast<double>((i * 7919) % 65536 - 32768);
        break;
      case ElemType::i32:
        v[i] = static_cast<double>(i * 104729 - 2147483647 + (i % 3));
        break;
      case ElemType::f32:
        v[i] = static_cast<float>(std::ldexp(i - 7.3, static_cast<int>(i % 40) - 20));
        break;
      default:
        v[i] = std::ldexp(i - 7.3, static_cast<int>(i % 200) - 100) + 1e-300;
        break;
    }
  }
  return v;
}

TEST(Idx, RoundTripEveryTypePlainAndGzip) {
  ScratchDir dir;
  for (ElemType t :
       {ElemType::u8, ElemType::i8, ElemType::i16, ElemType::i32, ElemType::f32, ElemType::f64}) {
    for (const char* ext : {".idx", ".idx.gz"}) {
      SCOPED_TRACE(std::string(elem_type_name(t)) + ext);
      const Shape shape{3, 2, 5};
      Array a(shape, array_dtype_for(t), sample_values(t, 30));
      RawTensor raw = from_array(a, t);
      auto path = dir / (std::string("t") + elem_type_name(t) + ext);
      write_idx(path, raw);
      RawTensor back = read_idx(path);
      EXPECT_EQ(back.type, t);
      EXPECT_EQ(back.shape, shape);
      EXPECT_EQ(back.bytes, raw.bytes);
      for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(back.value(i), a.data[i]) << i;
      const auto file = test::read_bytes(path);
      if (std::string(ext) == ".idx.gz") {
        ASSERT_GE(file.size(), 2u);
        EXPECT_EQ(file[0], 0x1f);  // really gzip
        EXPECT_EQ(file[1], 0x8b);
      } else {
        EXPECT_EQ(file.size(), 4 + 12 + 30 * elem_type_size(t));
      }
    }
  }
}

// The layout written by hand from the format description: big-endian dims and elements.
TEST(Idx, ReadsHandWrittenBigEndianFile) {
  ScratchDir dir;
  const std::vector<uint8_t> bytes = {0x00, 0x00, 0x0B, 0x02,              // i16, rank 2
                                      0x00, 0x00, 0x00, 0x02, 0x00, 0x00,  // dims 2,
                                      0x00, 0x01,                          // 1
                                      0xFF, 0xFE, 0x01, 0x00};             // -2, 256
  for (bool gz : {false, true}) {
    auto path = dir / (gz ? "h.gz" : "h");
    write_bytes(path, gz ? gzip(bytes) : bytes);
    RawTensor t = read_idx(path);
    EXPECT_EQ(t.type, ElemType::i16);
    EXPECT_EQ(t.shape, (Shape{2, 1}));
    EXPECT_EQ(t.value(0), -2.0);
    EXPECT_EQ(t.value(1), 256.0);
  }
  // f32 1.5 = 0x3FC00000 and f64 -0.25 = 0xBFD0000000000000, big-endian.
  write_bytes(dir / "f", {0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0});
  EXPECT_EQ(read_idx(dir / "f").value(0), 1.5);
  write_bytes(dir / "d", {0, 0, 0x0E, 1, 0, 0, 0, 1, 0xBF, 0xD0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(read_idx(dir / "d").value(0), -0.25);
  // The writer produces exactly this layout.
  RawTensor i16{ElemType::i16, {2, 1}, {0xFE, 0xFF, 0x00, 0x01}};
  write_idx(dir / "w", i16);
  EXPECT_EQ(test::read_bytes(dir / "w"), bytes);
}

TEST(Idx, RankZeroEmptyAndConcatenatedGzip) {
  ScratchDir dir;
  write_bytes(dir / "scalar", {0, 0, 0x08, 0, 42});
  RawTensor s = read_idx(dir / "scalar");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.value(0), 42.0);

  write_bytes(dir / "empty.gz", gzip({0, 0, 0x08, 2, 0, 0, 0, 0, 0, 0, 0, 5}));
  RawTensor e = read_idx(dir / "empty.gz");
  EXPECT_EQ(e.shape, (Shape{0, 5}));
  EXPECT_TRUE(e.bytes.empty());

  // `cat a.gz b.gz` is one valid gzip stream holding both parts.
  std::vector<uint8_t> part1 = {0, 0, 0x08, 1, 0, 0, 0, 4, 1, 2};
  std::vector<uint8_t> both = gzip(part1);
  std::vector<uint8_t> second = gzip({3, 4});
  both.insert(both.end(), second.begin(), second.end());
  write_bytes(dir / "cat.gz", both);
  RawTensor c = read_idx(dir / "cat.gz");
  EXPECT_EQ(c.bytes, (std::vector<uint8_t>{1, 2, 3, 4}));
}

// A gzip member ending one byte before the end of the reader's 64 KiB input buffer: the next
// member's magic number straddles two reads and is still recognized.
TEST(Idx, GzipMemberBoundaryInsideTheMagicNumber) {
  ScratchDir dir;
  constexpr size_t kBuffer = 65536;
  std::vector<uint8_t> first;
  for (uint32_t n = 65000; n < kBuffer; ++n) {  // n data bytes in the first member, 2 after
    const uint32_t count = n + 2;
    std::vector<uint8_t> part = {0,
                                 0,
                                 0x08,
                                 1,
                                 static_cast<uint8_t>(count >> 24),
                                 static_cast<uint8_t>(count >> 16),
                                 static_cast<uint8_t>(count >> 8),
                                 static_cast<uint8_t>(count)};
    part.resize(8 + n, 7);
    first = gzip(part, 0);
    if (first.size() >= kBuffer - 1) break;
  }
  ASSERT_EQ(first.size(), kBuffer - 1);
  std::vector<uint8_t> both = first;
  const std::vector<uint8_t> second = gzip({9, 9});
  both.insert(both.end(), second.begin(), second.end());
  write_bytes(dir / "edge.gz", both);
  RawTensor t = read_idx(dir / "edge.gz");
  ASSERT_GE(t.bytes.size(), 2u);
  EXPECT_EQ(t.bytes[t.bytes.size() - 1], 9);
  EXPECT_EQ(t.bytes[t.bytes.size() - 3], 7);
}

TEST(Idx, MalformedHeadersAreFormatErrors) {
  ScratchDir dir;
  auto check = [&](const std::string& name, const std::vector<uint8_t>& bytes,
                   std::vector<std::string> parts) {
    SCOPED_TRACE(name);
    for (bool gz : {false, true}) {
      auto path = dir / (name + (gz ? ".gz" : ""));
      write_bytes(path, gz ? gzip(bytes) : bytes);
      parts.push_back(path.string());
      expect_format_error([&] { read_idx(path); }, parts);
      parts.pop_back();
    }
  };
  check("empty", {}, {"truncated at byte 0", "magic"});
  check("short_magic", {0, 0}, {"truncated at byte 2", "magic"});
  check("bad_magic", {1, 0, 8, 1, 0, 0, 0, 1, 7}, {"bad IDX magic", "01 00 08 01", "byte 0"});
  check("bad_type", {0, 0, 0x0A, 1, 0, 0, 0, 1, 7}, {"bad IDX magic", "00 00 0a 01"});
  check("short_dims", {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0},
        {"truncated at byte 14", "3 dimension sizes"});
  // Plain files are checked against their size up front, gzip content while it is read.
  check("short_data", {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5}, {"[2, 3]", "need 6"});
  check("long_data", {0, 0, 8, 1, 0, 0, 0, 2, 1, 2, 3}, {"[2]", "need 2 data bytes"});
  check("short_i32", {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0}, {"I32", "need 8"});
}

TEST(Idx, HugeDimsDoNotAllocateOrOverflow) {
  ScratchDir dir;
  // 2^32-1 four times overflows 64 bits; 2^32-1 x 256 does not but far exceeds the file.
  std::vector<uint8_t> overflow = {0, 0, 0x0E, 4};
  std::vector<uint8_t> huge = {0, 0, 0x08, 2};
  for (int i = 0; i < 4; ++i) overflow.insert(overflow.end(), {0xFF, 0xFF, 0xFF, 0xFF});
  huge.insert(huge.end(), {0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x00});
  huge.insert(huge.end(), {1, 2, 3});
  for (bool gz : {false, true}) {
    write_bytes(dir / "o", gz ? gzip(overflow) : overflow);
    expect_format_error([&] { read_idx(dir / "o"); }, {"more data than any file holds"});
    write_bytes(dir / "h", gz ? gzip(huge) : huge);
    expect_format_error([&] { read_idx(dir / "h"); }, {"need 1099511627520"});
  }
}

TEST(Idx, GzipErrorsAreFormatErrors) {
  ScratchDir dir;
  std::vector<uint8_t> payload = {0, 0, 8, 1, 0, 0, 0x01, 0x00};
  for (int i = 0; i < 256; ++i) payload.push_back(static_cast<uint8_t>(i * 7));
  const std::vector<uint8_t> gz = gzip(payload);

  std::vector<uint8_t> cut(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  write_bytes(dir / "cut.gz", cut);
  expect_format_error([&] { read_idx(dir / "cut.gz"); }, {"truncated gzip stream", "cut.gz"});

  // Only the 8-byte trailer (CRC-32, length) is missing: the content is complete but unverified.
  std::vector<uint8_t> no_trailer(gz.begin(), gz.end() - 8);
  write_bytes(dir / "no_trailer.gz", no_trailer);
  expect_format_error([&] { read_idx(dir / "no_trailer.gz"); }, {"truncated gzip stream"});

  std::vector<uint8_t> bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0x55;  // inside the CRC-32
  write_bytes(dir / "crc.gz", bad_crc);
  expect_format_error([&] { read_idx(dir / "crc.gz"); },
                      {"gzip error", "compressed byte", "check"});

  std::vector<uint8_t> bad_header = gz;
  bad_header[2] = 7;  // compression method must be 8 (deflate)
  write_bytes(dir / "method.gz", bad_header);
  expect_format_error([&] { read_idx(dir / "method.gz"); }, {"gzip error"});

  std::vector<uint8_t> trailing = gz;
  trailing.insert(trailing.end(), {'j', 'u', 'n', 'k'});
  write_bytes(dir / "trailing.gz", trailing);
  expect_format_error([&] { read_idx(dir / "trailing.gz"); }, {"4 bytes of trailing garbage"});
}

TEST(Idx, MissingFileAndDirectory) {
  ScratchDir dir;
  expect_format_error([&] { read_idx(dir / "nope.idx"); }, {"nope.idx", "cannot open"});
  expect_format_error([&] { read_idx(dir.path()); }, {"not a regular file"});
}

// Every truncation and many random corruptions either parse or raise FormatError (this is
// where an out-of-bounds read or a forged size would show up, e.g. under sanitizers).
TEST(Idx, TruncationsAndCorruptionsNeverCrash) {
  ScratchDir dir;
  std::vector<uint8_t> payload = {0, 0, 0x0B, 2, 0, 0, 0, 3, 0, 0, 0, 4};
  for (int i = 0; i < 24; ++i) payload.push_back(static_cast<uint8_t>(i * 11));
  std::mt19937 rng(1234);
  for (bool gz : {false, true}) {
    const std::vector<uint8_t> file = gz ? gzip(payload) : payload;
    for (size_t len = 0; len < file.size(); ++len) {
      write_bytes(dir / "t",
                  std::vector<uint8_t>(file.begin(), file.begin() + static_cast<long>(len)));
      EXPECT_THROW(read_idx(dir / "t"), FormatError) << "length " << len << (gz ? " gz" : "");
    }
    for (int iter = 0; iter < 300; ++iter) {
      std::vector<uint8_t> bad = file;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f)
        bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      write_bytes(dir / "c", bad);
      try {
        RawTensor t = read_idx(dir / "c");
        EXPECT_EQ(t.bytes.size(), static_cast<size_t>(t.numel()) * elem_type_size(t.type));
      } catch (const FormatError&) {
      }
    }
  }
}

TEST(Idx, WriteRejectsWhatIdxCannotHold) {
  ScratchDir dir;
  EXPECT_THROW(write_idx(dir / "x", RawTensor{ElemType::bf16, {1}, {0, 0}}), Error);
  EXPECT_THROW(write_idx(dir / "x", RawTensor{ElemType::u8, {3}, {1, 2}}), Error);
  EXPECT_THROW(write_idx(dir / "x", RawTensor{ElemType::u8, {-1}, {}}), Error);
  EXPECT_TRUE(dir.listing().empty());
}

}  // namespace
}  // namespace mn
