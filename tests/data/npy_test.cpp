// .npy files written by NumPy (tests/data/fixtures/npy/make_npy_fixtures.py) read as NumPy
// reads them; our writer's files read back; malformed files are FormatErrors naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <meganeura/tensor_data.h>

#include "data/test_util.h"

namespace mn {
namespace {

using test::expect_format_error;
using test::read_bytes;
using test::ScratchDir;
using test::write_bytes;

const std::filesystem::path kDir = std::filesystem::path(MN_SOURCE_DIR) / "tests/data/fixtures/npy";

// The fixture script's values: (i % 23) - 7 for element i.
double fixture_value(int64_t i) { return static_cast<double>(i % 23 - 7); }

TEST(Npy, EveryNumberTypeReadsNumPysValues) {
  struct Case {
    const char* file;
    ElemType type;
  };
  for (const Case& c : {Case{"f4", ElemType::f32}, Case{"f8", ElemType::f64},
                        Case{"f2", ElemType::f16}, Case{"i8", ElemType::i64},
                        Case{"i4", ElemType::i32}, Case{"i2", ElemType::i16},
                        Case{"i1", ElemType::i8}, Case{"f4_big", ElemType::f32},
                        Case{"i8_big", ElemType::i64}}) {
    const RawTensor t = read_npy(kDir / (std::string(c.file) + ".npy"));
    EXPECT_EQ(t.type, c.type) << c.file;
    ASSERT_EQ(t.shape, (Shape{3, 4, 5})) << c.file;
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_EQ(t.value(i), fixture_value(i)) << c.file << " element " << i;
    }
  }
  // Unsigned types hold NumPy's wrapped negatives.
  for (const auto& [file, bits] : {std::pair{"u1", 8}, std::pair{"u2", 16}, std::pair{"u4", 32}}) {
    const RawTensor t = read_npy(kDir / (std::string(file) + ".npy"));
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double want = std::fmod(fixture_value(i) + std::ldexp(1.0, bits), std::ldexp(1.0, bits));
      ASSERT_EQ(t.value(i), want) << file << " element " << i;
    }
  }
  const RawTensor b = read_npy(kDir / "b1.npy");
  EXPECT_EQ(b.type, ElemType::boolean);
  for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.value(i), fixture_value(i) != 0 ? 1 : 0);
}

TEST(Npy, FortranOrderScalarsEmptyArraysAndVersionTwo) {
  const RawTensor f = read_npy(kDir / "fortran.npy");
  const RawTensor c = read_npy(kDir / "f4.npy");
  EXPECT_EQ(f.shape, c.shape);
  EXPECT_EQ(f.bytes, c.bytes);  // reordered to C order
  const RawTensor s = read_npy(kDir / "scalar.npy");
  EXPECT_EQ(s.shape, Shape{});
  EXPECT_EQ(s.value(0), 2.5);
  const RawTensor e = read_npy(kDir / "empty.npy");
  EXPECT_EQ(e.shape, (Shape{0, 3}));
  EXPECT_TRUE(e.bytes.empty());
  const RawTensor v2 = read_npy(kDir / "v2.npy");
  ASSERT_EQ(v2.shape, (Shape{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(v2.value(i), fixture_value(i));
}

TEST(Npy, WrittenFilesReadBackAndAlignTheirData) {
  ScratchDir dir("npy");
  for (const char* file : {"f4", "f2", "i8", "u1", "b1", "scalar", "empty"}) {
    const RawTensor t = read_npy(kDir / (std::string(file) + ".npy"));
    const auto path = dir / (std::string(file) + ".npy");
    write_npy(path, t);
    const RawTensor back = read_npy(path);
    EXPECT_EQ(back.type, t.type) << file;
    EXPECT_EQ(back.shape, t.shape) << file;
    EXPECT_EQ(back.bytes, t.bytes) << file;
    const std::vector<uint8_t> bytes = read_bytes(path);
    EXPECT_EQ((bytes.size() - back.bytes.size()) % 64, 0u) << file;  // NumPy's alignment
  }
  RawTensor bad;
  bad.type = ElemType::bf16;
  bad.shape = {2};
  bad.bytes.resize(4);
  EXPECT_THROW(write_npy(dir / "bf16.npy", bad), Error);  // NumPy has no bf16
}

TEST(Npy, MalformedFilesAreFormatErrors) {
  ScratchDir dir("npy");
  expect_format_error([&] { read_npy(kDir / "complex.npy"); }, {"complex.npy", "'<c8'"});
  expect_format_error([&] { read_npy(kDir / "structured.npy"); }, {"structured"});
  expect_format_error([&] { read_npy(dir / "missing.npy"); }, {"missing.npy"});
  const std::vector<uint8_t> good = read_bytes(kDir / "f4.npy");
  auto with = [&](const std::function<void(std::vector<uint8_t>&)>& change) {
    std::vector<uint8_t> b = good;
    change(b);
    write_bytes(dir / "bad.npy", b);
    return [&] { read_npy(dir / "bad.npy"); };
  };
  expect_format_error(with([](auto& b) { b[1] = 'X'; }), {"bad.npy", "magic"});
  expect_format_error(with([](auto& b) { b[6] = 9; }), {"version 9"});
  expect_format_error(with([](auto& b) { b.resize(b.size() - 1); }), {"bad.npy", "truncated"});
  expect_format_error(with([](auto& b) { b.resize(40); }), {"bad.npy"});
  expect_format_error(with([](auto& b) { b[8] = 0xff; b[9] = 0xff; }), {"header length"});
  const std::string header(good.begin() + 10, good.begin() + 10 + 118);
  auto with_header = [&](std::string h) {
    h.resize(header.size(), ' ');
    return with([h](auto& b) { std::copy(h.begin(), h.end(), b.begin() + 10); });
  };
  expect_format_error(with_header("{'descr': '<f4', 'shape': (3, 4, 5), }"), {"lacks"});
  expect_format_error(with_header("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,), }"),
                      {"True or False"});
  expect_format_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }"),
                      {"dimension"});
  expect_format_error(
      with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
      {"past int64"});
  expect_format_error(
      with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }"),
      {"more than the file holds"});
  expect_format_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shap': (3,), }"),
                      {"unknown key 'shap'"});
}

}  // namespace
}  // namespace mn
