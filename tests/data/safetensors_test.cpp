#include <gtest/gtest.h>
#include <sys/resource.h>

#include <bit>
#include <cmath>
#include <csignal>
#include <random>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/error.h>

#include "data/test_util.h"

namespace mn {
namespace {

using test::expect_format_error;
using test::read_bytes;
using test::ScratchDir;
using test::write_bytes;

// A file image assembled by hand from the format description.
std::vector<uint8_t> file_image(const std::string& header, const std::vector<uint8_t>& data,
                                std::optional<uint64_t> forged_length = std::nullopt) {
  std::vector<uint8_t> out(8);
  uint64_t n = forged_length.value_or(header.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

TEST(Safetensors, ReadsHandWrittenFile) {
  // F16 1.0 = 0x3c00, -2.0 = 0xc000; BF16 1.0 = 0x3f80; I64 -5; little-endian.
  const std::string header = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"BF16","shape":[1,1],"data_offsets":[4,6]},)"
                             R"("c":{"dtype":"I64","shape":[],"data_offsets":[6,14]},)"
                             R"("__metadata__":{"epoch":"3"}}   )";
  const std::vector<uint8_t> data = {0x00, 0x3c, 0x00, 0xc0, 0x80, 0x3f, 0xfb,
                                     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  auto r = SafetensorsReader::from_bytes(file_image(header, data), "hand");
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"epoch", "3"}}));
  ASSERT_EQ(r.entries().size(), 3u);
  EXPECT_EQ(r.entries()[0].name, "a");  // data-section order
  EXPECT_EQ(r.entries()[2].name, "c");
  Array a = r.array("a");
  EXPECT_EQ(a.dtype, DType::f16);
  EXPECT_EQ(a.shape, (Shape{2}));
  EXPECT_EQ(a.data, (std::vector<double>{1.0, -2.0}));
  Array b = r.array("b");
  EXPECT_EQ(b.dtype, DType::bf16);
  EXPECT_EQ(b.shape, (Shape{1, 1}));
  EXPECT_EQ(b.data[0], 1.0);
  Array c = r.array("c");
  EXPECT_EQ(c.dtype, DType::i32);
  EXPECT_TRUE(c.shape.empty());
  EXPECT_EQ(c.data[0], -5.0);
  EXPECT_EQ(r.raw("a").bytes, (std::vector<uint8_t>{0x00, 0x3c, 0x00, 0xc0}));
  expect_format_error([&] { r.raw("missing"); }, {"hand", "no tensor named 'missing'", "a, b, c"});
}

TEST(Safetensors, WritesTheSpecifiedLayout) {
  ScratchDir dir;
  RawTensor w{ElemType::f32, {2}, {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}};  // 1.0, -2.0
  RawTensor n{ElemType::u8, {3}, {7, 8, 9}};
  std::vector<TensorView> views = {view("w", w), view("n", n)};
  write_safetensors(dir / "x.safetensors", views, {{"k", "v"}});
  const auto bytes = read_bytes(dir / "x.safetensors");
  ASSERT_GE(bytes.size(), 8u);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  EXPECT_EQ((8 + len) % 8, 0u) << "data section aligned to 8 bytes";
  ASSERT_EQ(bytes.size(), 8 + len + 11);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(len));
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  EXPECT_EQ(j["w"]["dtype"], "F32");
  EXPECT_EQ(j["w"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(j["w"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(j["n"]["dtype"], "U8");
  EXPECT_EQ(j["n"]["data_offsets"], nlohmann::json::array({8, 11}));
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 8 + static_cast<long>(len), bytes.end()),
            (std::vector<uint8_t>{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 7, 8, 9}));
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"x.safetensors"}));
}

TEST(Safetensors, ArraysRoundTripInEveryDtype) {
  ScratchDir dir;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0.0, 100.0);
  std::vector<double> values(257);
  for (double& v : values) v = normal(rng);
  values[0] = 0.1;
  values[1] = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);  // exact rounding needed
  values[2] = 1e6;                                               // f16 overflow
  values[3] = -0.0;
  std::map<std::string, Array> arrays;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    arrays.emplace(std::string("x_") + dtype_name(t), Array({257}, t, values));
  }
  arrays.emplace("ids", Array({2, 3}, DType::i32, {0, -1, 5, 2147483647, -2147483648.0, 9}));
  arrays.emplace("counts", Array({3}, DType::u32, {0, 4294967295.0, 12}));
  arrays.emplace("scalar", Array::scalar(2.5));
  arrays.emplace("empty", Array({0, 4}, DType::f32));
  save_safetensors(dir / "m.safetensors", arrays, {{"step", "100"}, {"optimizer", "adam"}});

  SafetensorsReader r(dir / "m.safetensors");
  EXPECT_EQ(r.metadata().at("step"), "100");
  EXPECT_EQ(r.entry("x_bf16").type, ElemType::bf16);
  EXPECT_EQ(r.entry("x_f16").type, ElemType::f16);
  auto loaded = load_safetensors(dir / "m.safetensors");
  ASSERT_EQ(loaded.size(), arrays.size());
  for (const auto& [name, a] : arrays) {
    SCOPED_TRACE(name);
    const Array& b = loaded.at(name);
    EXPECT_EQ(b.dtype, a.dtype);
    EXPECT_EQ(b.shape, a.shape);
    ASSERT_EQ(b.data.size(), a.data.size());
    for (size_t i = 0; i < a.data.size(); ++i) {
      double expect = a.data[i];
      if (a.dtype == DType::f32) expect = static_cast<float>(expect);
      if (a.dtype == DType::f16) expect = f16_value(f16_bits(expect));
      if (a.dtype == DType::bf16) expect = bf16_value(bf16_bits(expect));
      EXPECT_EQ(b.data[i], expect) << i;
      EXPECT_EQ(std::signbit(b.data[i]), std::signbit(a.data[i])) << i;
    }
  }
  EXPECT_EQ(loaded.at("x_bf16").data[1], 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(loaded.at("x_f16").data[2], INFINITY);
  EXPECT_EQ(loaded.at("x_f16").data[0], 0.0999755859375);  // nearest f16 to 0.1
  // Reading and writing again reproduces the file byte for byte.
  save_safetensors(dir / "again.safetensors", loaded, r.metadata());
  EXPECT_EQ(read_bytes(dir / "again.safetensors"), read_bytes(dir / "m.safetensors"));
}

TEST(Safetensors, RawRoundTripOfEveryType) {
  ScratchDir dir;
  std::vector<RawTensor> raws;
  std::vector<TensorView> views;
  std::mt19937 rng(11);
  const std::vector<ElemType> types = {
      ElemType::boolean, ElemType::u8,  ElemType::i8,  ElemType::i16,     ElemType::u16,
      ElemType::i32,     ElemType::u32, ElemType::i64, ElemType::u64,     ElemType::f16,
      ElemType::bf16,    ElemType::f32, ElemType::f64, ElemType::f8_e4m3, ElemType::f8_e5m2};
  raws.reserve(types.size());
  for (ElemType t : types) {
    RawTensor r{t, {3, 5}, std::vector<uint8_t>(15 * elem_type_size(t))};
    for (uint8_t& b : r.bytes) b = t == ElemType::boolean ? rng() % 2 : static_cast<uint8_t>(rng());
    raws.push_back(r);
    views.push_back(view(elem_type_name(t), raws.back()));
  }
  write_safetensors(dir / "raw.safetensors", views);
  SafetensorsReader r(dir / "raw.safetensors");
  EXPECT_TRUE(r.metadata().empty());
  for (size_t i = 0; i < types.size(); ++i) {
    RawTensor back = r.raw(elem_type_name(types[i]));
    EXPECT_EQ(back.type, types[i]);
    EXPECT_EQ(back.shape, (Shape{3, 5}));
    EXPECT_EQ(back.bytes, raws[i].bytes) << elem_type_name(types[i]);
  }
}

// Recomputes the f32 values of tests/data/fixtures/make_safetensors_fixture.py.
std::vector<float> fixture_x() {
  std::vector<double> v = {0.0,
                           -0.0,
                           1.0,
                           -2.5,
                           65504.0,
                           65519.0,
                           65520.0,
                           1e6,
                           -1e-3,
                           1.0 + std::ldexp(1.0, -11),
                           1.0 + 3 * std::ldexp(1.0, -11),
                           1.0 + std::ldexp(1.0, -8),
                           1.0 + 3 * std::ldexp(1.0, -8),
                           std::ldexp(1.0, -25),
                           3 * std::ldexp(1.0, -25),
                           std::ldexp(1.0, -24),
                           std::ldexp(1.0, -14) - std::ldexp(1.0, -24),
                           std::ldexp(1.0, -126),
                           std::ldexp(1.0, -133),
                           3 * std::ldexp(1.0, -134),
                           3.0e38,
                           -3.4e38,
                           INFINITY,
                           -INFINITY};
  for (int i = 0; i < 40; ++i) {
    v.push_back(((i * 37) % 101 - 50) * 0.173 * std::ldexp(1.0, (i % 9) - 4));
  }
  return std::vector<float>(v.begin(), v.end());
}

TEST(Safetensors, ReadsFileWrittenByPythonSafetensors) {
  const std::filesystem::path path =
      std::filesystem::path(MN_SOURCE_DIR) / "tests/data/fixtures/torch_mixed.safetensors";
  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"source", "fixture"}}));
  EXPECT_EQ(r.entries().size(), 8u);

  const std::vector<float> x = fixture_x();
  Array xf = r.array("x_f32");
  ASSERT_EQ(xf.shape, (Shape{64}));
  RawTensor h = r.raw("x_f16");
  RawTensor bf = r.raw("x_bf16");
  ASSERT_EQ(h.type, ElemType::f16);
  ASSERT_EQ(bf.type, ElemType::bf16);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(xf.data[i], static_cast<double>(x[i])) << i;
    // PyTorch's f32 -> f16/bf16 conversions and ours produce the same bits.
    const uint16_t torch_h = static_cast<uint16_t>(h.bytes[2 * i] | h.bytes[2 * i + 1] << 8);
    const uint16_t torch_bf = static_cast<uint16_t>(bf.bytes[2 * i] | bf.bytes[2 * i + 1] << 8);
    EXPECT_EQ(f16_bits(x[i]), torch_h) << i << ": " << x[i];
    EXPECT_EQ(bf16_bits(x[i]), torch_bf) << i << ": " << x[i];
  }
  Array grid = r.array("grid_f32");
  EXPECT_EQ(grid.shape, (Shape{2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(grid.data[i], i * 0.25 - 2.0);
  Array labels = r.array("labels_i64");
  EXPECT_EQ(labels.dtype, DType::i32);
  EXPECT_EQ(labels.data, (std::vector<double>{0, 9, -3, 2147483647, -2147483648.0}));
  Array ids = r.array("ids_i32");
  EXPECT_EQ(ids.shape, (Shape{2, 2}));
  EXPECT_EQ(ids.data, (std::vector<double>{1, -2, 3, -4}));
  Array px = r.array("pixels_u8");
  EXPECT_EQ(px.dtype, DType::u32);
  EXPECT_EQ(px.data, (std::vector<double>{0, 1, 128, 255}));
  Array s = r.array("scalar_f32");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.data[0], 1.5);
}

TEST(Safetensors, MalformedFilesAreFormatErrors) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<uint8_t> eight(8, 0);
  auto bad = [](const std::vector<uint8_t>& image, std::vector<std::string> parts) {
    parts.push_back("bad.safetensors");
    expect_format_error([&] { SafetensorsReader::from_bytes(image, "bad.safetensors"); }, parts);
  };
  bad({1, 2, 3}, {"3 bytes, too short"});
  bad(file_image("{}", {}, 1000), {"header length 1000", "runs past the end"});
  bad(file_image("{}", {}, ~uint64_t{0}), {"exceeds the limit"});
  bad(file_image(" {}", {}), {"does not start with '{'"});
  bad(file_image("[]", {}), {"does not start with '{'"});
  bad(file_image("{" + ok_entry, eight), {"invalid JSON header"});
  bad(file_image("{\"t\":1,\"t\":2}", {}), {"repeats the key 't'"});
  bad(file_image("{\"t\":5}", {}), {"tensor 't'", "not an object"});
  bad(file_image(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", eight), {"no \"dtype\""});
  bad(file_image(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", eight), {"no \"shape\""});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[2]}})", eight), {"no \"data_offsets\""});
  bad(file_image(R"({"t":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", eight),
      {"tensor 't'", "unknown dtype 'F17'"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
      {"shape [-2]"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
      {"not a non-negative integer"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                 eight),
      {"overflows"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
      {"is not [begin, end]"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
      {"end before they begin"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
      {"span 8 bytes", "needs 12"});
  bad(file_image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", eight),
      {"run past the 8-byte data section"});
  bad(file_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 eight),
      {"overlap tensor 'a' [0, 8]"});
  bad(file_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
      {"data bytes [0, 4) before tensor 'a' belong to no tensor"});
  bad(file_image("{" + ok_entry + "}", std::vector<uint8_t>(12, 0)),
      {"data section is 12 bytes but the tensors cover 8"});
  bad(file_image(R"({"__metadata__":[1]})", {}), {"\"__metadata__\" is not an object"});
  bad(file_image(R"({"__metadata__":{"a":1}})", {}), {"value of 'a' is not a string"});
  bad(file_image("{\"\xff\":{}}", {}), {"invalid JSON header"});  // not UTF-8
  // An I64 value outside the i32 Array range is reported when converting, naming the tensor.
  auto big = SafetensorsReader::from_bytes(
      file_image(R"({"big":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                 {0, 0, 0, 0, 1, 0, 0, 0}),
      "f.safetensors");
  expect_format_error([&] { big.array("big"); }, {"f.safetensors: tensor 'big'", "does not fit"});
}

TEST(Safetensors, EveryTruncationAndCorruptionIsAFormatErrorOrParses) {
  ScratchDir dir;
  std::map<std::string, Array> arrays = {{"a", Array({3}, DType::f16, {1, 2, 3})},
                                         {"b", Array({2, 2}, DType::i32, {1, 2, 3, 4})}};
  save_safetensors(dir / "ok.safetensors", arrays, {{"m", "x"}});
  const auto file = read_bytes(dir / "ok.safetensors");
  for (size_t len = 0; len < file.size(); ++len) {
    std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<long>(len));
    EXPECT_THROW(SafetensorsReader::from_bytes(cut), FormatError) << len;
  }
  std::mt19937 rng(5);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> bad = file;
    bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    try {
      auto r = SafetensorsReader::from_bytes(bad);
      for (const auto& e : r.entries()) {
        RawTensor t = r.raw(e.name);
        EXPECT_EQ(t.bytes.size(), static_cast<size_t>(t.numel()) * elem_type_size(t.type));
        try {
          r.array(e.name);
        } catch (const FormatError&) {
        }
      }
    } catch (const FormatError&) {
    }
  }
}

TEST(Safetensors, WriterRejectsBadInputAndLeavesNothing) {
  ScratchDir dir;
  RawTensor t{ElemType::f32, {2}, std::vector<uint8_t>(8)};
  RawTensor short_t{ElemType::f32, {3}, std::vector<uint8_t>(8)};
  std::vector<TensorView> dup = {view("x", t), view("x", t)};
  EXPECT_THROW(write_safetensors(dir / "d.safetensors", dup), Error);
  std::vector<TensorView> reserved = {view("__metadata__", t)};
  EXPECT_THROW(write_safetensors(dir / "d.safetensors", reserved), Error);
  std::vector<TensorView> sizes = {view("x", short_t)};
  EXPECT_THROW(write_safetensors(dir / "d.safetensors", sizes), Error);
  std::vector<TensorView> bad_name = {view("\xff", t)};
  EXPECT_THROW(write_safetensors(dir / "d.safetensors", bad_name), Error);
  EXPECT_TRUE(dir.listing().empty());
  std::vector<TensorView> ok = {view("x", t)};
  EXPECT_THROW(write_safetensors(dir / "no/such/dir/x.safetensors", ok), Error);
}

// A write that fails midway (here: the file size limit, as a full disk would) leaves the
// previous file untouched and no temporary file behind.
TEST(Safetensors, FailedWriteLeavesOldFileIntact) {
  ScratchDir dir;
  const auto path = dir / "ckpt.safetensors";
  save_safetensors(path, {{"w", Array({4}, DType::f32, {1, 2, 3, 4})}}, {{"step", "1"}});
  const auto before = read_bytes(path);

  RawTensor big{ElemType::f32, {1 << 18}, std::vector<uint8_t>(size_t{4} << 18, 0x42)};
  std::vector<TensorView> views = {view("big", big)};
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    write_safetensors(path, views, {{"step", "2"}});
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("ckpt.safetensors"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"ckpt.safetensors"}));
  EXPECT_EQ(SafetensorsReader(path).metadata().at("step"), "1");

  // Without the limit the same write replaces the file completely.
  write_safetensors(path, views, {{"step", "2"}});
  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata().at("step"), "2");
  EXPECT_EQ(r.raw("big").bytes, big.bytes);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"ckpt.safetensors"}));
}

TEST(Safetensors, OpenErrors) {
  ScratchDir dir;
  expect_format_error([&] { SafetensorsReader(dir / "none.safetensors"); },
                      {"none.safetensors", "cannot open"});
  expect_format_error([&] { SafetensorsReader{dir.path()}; }, {"not a regular file"});
  write_bytes(dir / "empty.safetensors", {});
  expect_format_error([&] { load_safetensors(dir / "empty.safetensors"); },
                      {"empty.safetensors", "0 bytes, too short"});
}

}  // namespace
}  // namespace mn
