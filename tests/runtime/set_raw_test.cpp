// Session::set_raw: file elements of one float dtype land in a tensor of another rounded once,
// to nearest even, exactly as the library's f16/bf16 encoders round the same values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/session.h>

namespace mn {
namespace {

// Values around every rounding case: bf16 and f16 ties (even and odd), subnormals, overflow
// past the f16 range, infinities and NaN.
std::vector<float> edge_values() {
  std::vector<float> v{0.0f,
                       -0.0f,
                       1.0f,
                       -2.5f,
                       65504.0f,
                       65520.0f,
                       1e6f,
                       3.0e38f,
                       1e-7f,
                       6e-8f,
                       1e-40f,
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu,  // bf16 ties
                        0x3f801000u, 0x3f803000u, 0x3f801001u}) {            // f16 ties
    v.push_back(std::bit_cast<float>(bits));
    v.push_back(-std::bit_cast<float>(bits));
  }
  return v;
}

double encoded(double v, DType to) {
  if (to == DType::bf16) return bf16_value(bf16_bits(v));
  if (to == DType::f16) return f16_value(f16_bits(v));
  return static_cast<float>(v);
}

std::vector<std::byte> bytes_of(const std::vector<float>& v, DType as) {
  std::vector<std::byte> out(v.size() * dtype_size(as));
  for (size_t i = 0; i < v.size(); ++i) {
    if (as == DType::f32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t b = as == DType::bf16 ? bf16_bits(v[i]) : f16_bits(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

TEST(SetRaw, ConvertsBetweenFloatDtypesRoundingOnce) {
  const std::vector<float> values = edge_values();
  const auto n = static_cast<int64_t>(values.size());
  for (DType from : {DType::f32, DType::f16, DType::bf16}) {
    for (DType to : {DType::f32, DType::f16, DType::bf16}) {
      Graph g;
      g.output("y", g.parameter("w", {n}, Init::zeros(), to) * 1.0);
      auto s = build_session(g);
      s->set_raw("w", from, bytes_of(values, from));
      const Array got = s->get("w");
      for (size_t i = 0; i < values.size(); ++i) {
        const double source = encoded(values[i], from);  // what the file holds
        const double want = encoded(source, to);
        EXPECT_TRUE(got.data[i] == want || (std::isnan(want) && std::isnan(got.data[i])))
            << dtype_name(from) << " -> " << dtype_name(to) << " element " << i << " (" << values[i]
            << "): got " << got.data[i] << ", want " << want;
      }
    }
  }
}

TEST(SetRaw, NanStaysNan) {
  Graph g;
  g.output("y", g.parameter("w", {1}, Init::zeros(), DType::bf16) * 1.0);
  auto s = build_session(g);
  s->set_raw("w", DType::f32, bytes_of({std::numeric_limits<float>::quiet_NaN()}, DType::f32));
  EXPECT_TRUE(std::isnan(s->get("w").data[0]));
}

TEST(SetRaw, WrongByteCountNamesTheTensor) {
  Graph g;
  g.output("y", g.parameter("w", {3}) * 1.0);
  auto s = build_session(g);
  try {
    s->set_raw("w", DType::bf16, std::vector<std::byte>(4));
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("6 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s->set_raw("nope", DType::f32, std::vector<std::byte>(12)), Error);
}

}  // namespace
}  // namespace mn
