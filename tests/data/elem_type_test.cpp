#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/error.h>

namespace mn {
namespace {

TEST(HalfFloat, EveryF16PatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double v = f16_value(static_cast<uint16_t>(b));
    const bool nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0;
    EXPECT_EQ(std::isnan(v), nan) << b;
    if (nan) {
      EXPECT_EQ(f16_bits(v) & 0xfe00u, (b & 0x8000u) | 0x7e00u) << b;  // quiet, same sign
    } else {
      ASSERT_EQ(f16_bits(v), b) << b;
    }
  }
}

TEST(HalfFloat, EveryBf16PatternRoundTripsAndMatchesF32Truncation) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double v = bf16_value(static_cast<uint16_t>(b));
    // bf16 is the top half of an f32.
    const float f = std::bit_cast<float>(b << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(v)) << b;
      EXPECT_EQ(bf16_bits(v) & 0xffc0u, (b & 0x8000u) | 0x7fc0u) << b;
    } else {
      ASSERT_EQ(v, static_cast<double>(f)) << b;
      ASSERT_EQ(bf16_bits(v), b) << b;
    }
  }
}

TEST(HalfFloat, KnownValues) {
  EXPECT_EQ(f16_bits(1.0), 0x3c00);
  EXPECT_EQ(f16_bits(-2.0), 0xc000);
  EXPECT_EQ(f16_bits(65504.0), 0x7bff);
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f16_bits(-0.0), 0x8000);
  EXPECT_EQ(f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(bf16_bits(1.0), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0), 0xc000);
  EXPECT_EQ(bf16_bits(3.140625), 0x4049);
  EXPECT_EQ(bf16_bits(-INFINITY), 0xff80);
}

TEST(HalfFloat, RoundsToNearestEven) {
  // f16 has 10 mantissa bits: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f16_bits(1.0 + std::ldexp(1.0, -11)), 0x3c00);      // tie -> even (down)
  EXPECT_EQ(f16_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f16_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
  EXPECT_EQ(f16_bits(65519.99), 0x7bff);  // below the midpoint to 2^16
  EXPECT_EQ(f16_bits(65520.0), 0x7c00);   // the midpoint rounds to even: infinity
  EXPECT_EQ(f16_bits(1e10), 0x7c00);
  EXPECT_EQ(f16_bits(-1e300), 0xfc00);
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -25)), 0x0000);      // half the smallest subnormal: even 0
  EXPECT_EQ(f16_bits(3 * std::ldexp(1.0, -25)), 0x0002);  // 1.5 quanta -> 2
  EXPECT_EQ(f16_bits(std::ldexp(1.0, -25) * 1.0000001), 0x0001);
  EXPECT_EQ(f16_bits(1e-300), 0x0000);
  EXPECT_EQ(f16_bits(std::ldexp(1023.5, -24)), 0x0400);  // subnormal rounds up into normal
  // bf16 has 7: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(bf16_bits(1.0 + 3 * std::ldexp(1.0, -8)), 0x3f82);
  // Rounding once from double: through f32 this value would first become the tie 1 + 2^-8 and
  // then round down to 1.
  EXPECT_EQ(bf16_bits(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3f81);
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -133)), 0x0001);  // smallest subnormal
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -134)), 0x0000);  // tie to even zero
  EXPECT_EQ(bf16_bits(3.4e38), 0x7f80);                 // beyond the largest bf16 midpoint
  EXPECT_EQ(bf16_bits(3.38e38), 0x7f7e);
}

// For values already in f32 there is no double rounding, and the library's Array rounding
// (round_to_dtype) must agree with the bit encoders.
TEST(HalfFloat, AgreesWithRoundToDtypeOnF32Values) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const double v = f;
    EXPECT_EQ(f16_value(f16_bits(v)), round_to_dtype(v, DType::f16)) << v;
    EXPECT_EQ(bf16_value(bf16_bits(v)), round_to_dtype(v, DType::bf16)) << v;
  }
}

TEST(RawTensorConversion, ArrayRoundTripsPerType) {
  Array f({3}, DType::f32, {0.1, -1e39, 1e-46});
  Array back = to_array(from_array(f));
  EXPECT_EQ(back.dtype, DType::f32);
  EXPECT_EQ(back.data[0], static_cast<double>(0.1f));
  EXPECT_EQ(back.data[1], -INFINITY);  // overflows f32
  EXPECT_EQ(back.data[2], 0.0);        // below half the smallest f32 subnormal

  Array i({4}, DType::i32, {0, -1, 2147483647, -2147483648.0});
  for (ElemType t : {ElemType::i32, ElemType::i64}) {
    Array b = to_array(from_array(i, t));
    EXPECT_EQ(b.dtype, DType::i32);
    EXPECT_EQ(b.data, i.data);
  }
  Array u({3}, DType::u32, {0, 255, 7});
  for (ElemType t : {ElemType::u8, ElemType::u16, ElemType::u32, ElemType::u64}) {
    Array b = to_array(from_array(u, t));
    EXPECT_EQ(b.dtype, DType::u32);
    EXPECT_EQ(b.data, u.data);
  }
}

TEST(RawTensorConversion, RejectsUnrepresentableValues) {
  EXPECT_THROW(from_array(Array({1}, DType::f32, {256}), ElemType::u8), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {-1}), ElemType::u32), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {0.5}), ElemType::i32), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {2147483648.0}), ElemType::i32), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {std::ldexp(1.0, 63)}), ElemType::i64), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {NAN}), ElemType::i16), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {2}), ElemType::boolean), Error);
  EXPECT_THROW(from_array(Array({1}, DType::f32, {1}), ElemType::f8_e4m3), Error);
  EXPECT_NO_THROW(from_array(Array({1}, DType::f32, {-std::ldexp(1.0, 63)}), ElemType::i64));
  // 64-bit values outside the i32/u32 Array range are reported, not wrapped.
  RawTensor big{ElemType::i64, {1}, {0, 0, 0, 0x80, 0, 0, 0, 0}};  // 2^31
  EXPECT_THROW(to_array(big), FormatError);
  RawTensor neg{ElemType::i64, {1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};  // -1
  EXPECT_EQ(to_array(neg).data[0], -1.0);
}

TEST(RawTensorConversion, ReadsF8Types) {
  // e4m3fn: 0x7e = 448 (largest), 0x7f = NaN; e5m2: 0x7b = 57344, 0x7c = inf.
  RawTensor e4{ElemType::f8_e4m3, {4}, {0x38, 0x7e, 0x7f, 0x01}};
  EXPECT_EQ(e4.value(0), 1.0);
  EXPECT_EQ(e4.value(1), 448.0);
  EXPECT_TRUE(std::isnan(e4.value(2)));
  EXPECT_EQ(e4.value(3), std::ldexp(1.0, -9));
  RawTensor e5{ElemType::f8_e5m2, {3}, {0x3c, 0x7b, 0xfc}};
  EXPECT_EQ(e5.value(0), 1.0);
  EXPECT_EQ(e5.value(1), 57344.0);
  EXPECT_EQ(e5.value(2), -INFINITY);
}

TEST(ElemTypes, NamesAndSizes) {
  for (ElemType t :
       {ElemType::boolean, ElemType::u8, ElemType::i8, ElemType::i16, ElemType::u16, ElemType::i32,
        ElemType::u32, ElemType::i64, ElemType::u64, ElemType::f16, ElemType::bf16, ElemType::f32,
        ElemType::f64, ElemType::f8_e4m3, ElemType::f8_e5m2}) {
    EXPECT_EQ(elem_type_from_name(elem_type_name(t)), t);
  }
  EXPECT_EQ(elem_type_size(ElemType::bf16), 2u);
  EXPECT_EQ(elem_type_size(ElemType::u64), 8u);
  EXPECT_THROW(elem_type_from_name("f32"), FormatError);  // the spec spells it F32
}

}  // namespace
}  // namespace mn
