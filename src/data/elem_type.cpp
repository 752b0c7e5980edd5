// File element types, exact f16/bf16/f8 bit conversions, and RawTensor <-> Array.
#include <meganeura/data.h>
#include <meganeura/error.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "data/bytes.h"

namespace mn {

namespace {

struct TypeInfo {
  ElemType type;
  const char* name;
  size_t size;
};

constexpr TypeInfo kTypes[] = {
    {ElemType::boolean, "BOOL", 1},    {ElemType::u8, "U8", 1},
    {ElemType::i8, "I8", 1},           {ElemType::i16, "I16", 2},
    {ElemType::u16, "U16", 2},         {ElemType::i32, "I32", 4},
    {ElemType::u32, "U32", 4},         {ElemType::i64, "I64", 8},
    {ElemType::u64, "U64", 8},         {ElemType::f16, "F16", 2},
    {ElemType::bf16, "BF16", 2},       {ElemType::f32, "F32", 4},
    {ElemType::f64, "F64", 8},         {ElemType::f8_e4m3, "F8_E4M3", 1},
    {ElemType::f8_e5m2, "F8_E5M2", 1},
};

const TypeInfo& info(ElemType t) {
  for (const auto& i : kTypes) {
    if (i.type == t) return i;
  }
  throw Error("unknown element type code " + std::to_string(static_cast<int>(t)));
}

// Rounds x >= 0 to an integer, ties to even, independent of the FPU rounding mode.
double round_half_even(double x) {
  double fl = std::floor(x);
  double frac = x - fl;  // exact: x and fl share an exponent range
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0.0)) fl += 1.0;
  return fl;
}

// Encodes v into an IEEE-754 binary format with the given field widths, rounding once, to
// nearest even, from the double (so there is no double rounding through f32).
uint32_t encode_ieee(double v, int exp_bits, int man_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint64_t sign = std::signbit(v) ? uint64_t{1} << (exp_bits + man_bits) : 0;
  const uint64_t inf = ((uint64_t{1} << exp_bits) - 1) << man_bits;
  if (std::isnan(v)) return static_cast<uint32_t>(sign | inf | (uint64_t{1} << (man_bits - 1)));
  double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint32_t>(sign | inf);
  if (a == 0.0) return static_cast<uint32_t>(sign);
  int e;
  std::frexp(a, &e);                          // a = m * 2^e with m in [0.5, 1)
  const int exp = std::max(e - 1, 1 - bias);  // subnormals share the minimum exponent
  if (exp - bias > 2) return static_cast<uint32_t>(sign | inf);     // far beyond the range
  const double q = round_half_even(std::ldexp(a, man_bits - exp));  // a in quanta, exact scaling
  // q in [0, 2^(man_bits+1)]: the biased exponent field absorbs a mantissa carry, and with
  // exp at the minimum a q below 2^man_bits lands in the subnormal encoding.
  const uint64_t mag = (static_cast<uint64_t>(exp + bias) << man_bits) + static_cast<uint64_t>(q) -
                       (uint64_t{1} << man_bits);
  if (mag >= inf) return static_cast<uint32_t>(sign | inf);
  return static_cast<uint32_t>(sign | mag);
}

double decode_ieee(uint32_t bits, int exp_bits, int man_bits, bool has_inf = true) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const bool neg = (bits >> (exp_bits + man_bits)) & 1u;
  const uint32_t ef = (bits >> man_bits) & exp_all;
  const uint32_t man = bits & ((1u << man_bits) - 1);
  double out;
  if (ef == exp_all && has_inf) {
    out = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (ef == exp_all && man == (1u << man_bits) - 1) {
    out = std::numeric_limits<double>::quiet_NaN();  // e4m3fn: only S.1111.111 is NaN
  } else if (ef == 0) {
    out = std::ldexp(static_cast<double>(man), 1 - bias - man_bits);
  } else {
    out = std::ldexp(static_cast<double>(man | (1u << man_bits)),
                     static_cast<int>(ef) - bias - man_bits);
  }
  return neg ? -out : out;
}

}  // namespace

const char* elem_type_name(ElemType t) { return info(t).name; }

ElemType elem_type_from_name(const std::string& name) {
  for (const auto& i : kTypes) {
    if (name == i.name) return i.type;
  }
  throw FormatError("unknown dtype '" + name +
                    "' (expected BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, "
                    "F8_E4M3 or F8_E5M2)");
}

size_t elem_type_size(ElemType t) { return info(t).size; }

uint16_t f16_bits(double v) { return static_cast<uint16_t>(encode_ieee(v, 5, 10)); }
double f16_value(uint16_t bits) { return decode_ieee(bits, 5, 10); }
uint16_t bf16_bits(double v) { return static_cast<uint16_t>(encode_ieee(v, 8, 7)); }
double bf16_value(uint16_t bits) { return decode_ieee(bits, 8, 7); }

double RawTensor::value(int64_t i) const {
  const size_t w = elem_type_size(type);
  if (i < 0 || static_cast<size_t>(i) >= bytes.size() / w) {
    throw Error("RawTensor::value: index " + std::to_string(i) + " out of range for " +
                std::to_string(bytes.size() / w) + " elements");
  }
  const uint8_t* p = bytes.data() + static_cast<size_t>(i) * w;
  using data::load_le;
  switch (type) {
    case ElemType::boolean:
      return p[0] != 0 ? 1.0 : 0.0;
    case ElemType::u8:
      return p[0];
    case ElemType::i8:
      return static_cast<int8_t>(p[0]);
    case ElemType::i16:
      return static_cast<int16_t>(load_le<uint16_t>(p));
    case ElemType::u16:
      return load_le<uint16_t>(p);
    case ElemType::i32:
      return static_cast<int32_t>(load_le<uint32_t>(p));
    case ElemType::u32:
      return load_le<uint32_t>(p);
    case ElemType::i64:
      return static_cast<double>(static_cast<int64_t>(load_le<uint64_t>(p)));
    case ElemType::u64:
      return static_cast<double>(load_le<uint64_t>(p));
    case ElemType::f16:
      return f16_value(load_le<uint16_t>(p));
    case ElemType::bf16:
      return bf16_value(load_le<uint16_t>(p));
    case ElemType::f32:
      return std::bit_cast<float>(load_le<uint32_t>(p));
    case ElemType::f64:
      return std::bit_cast<double>(load_le<uint64_t>(p));
    case ElemType::f8_e4m3:
      return decode_ieee(p[0], 4, 3, /*has_inf=*/false);
    case ElemType::f8_e5m2:
      return decode_ieee(p[0], 5, 2);
  }
  return 0.0;
}

DType array_dtype_for(ElemType t) {
  switch (t) {
    case ElemType::f16:
      return DType::f16;
    case ElemType::bf16:
      return DType::bf16;
    case ElemType::f32:
    case ElemType::f64:
    case ElemType::f8_e4m3:
    case ElemType::f8_e5m2:
      return DType::f32;
    case ElemType::boolean:
    case ElemType::u8:
    case ElemType::u16:
    case ElemType::u32:
    case ElemType::u64:
      return DType::u32;
    case ElemType::i8:
    case ElemType::i16:
    case ElemType::i32:
    case ElemType::i64:
      return DType::i32;
  }
  return DType::f32;
}

ElemType elem_type_for(DType t) {
  switch (t) {
    case DType::f32:
      return ElemType::f32;
    case DType::f16:
      return ElemType::f16;
    case DType::bf16:
      return ElemType::bf16;
    case DType::i32:
      return ElemType::i32;
    case DType::u32:
      return ElemType::u32;
  }
  return ElemType::f32;
}

Array to_array(const RawTensor& t, const std::string& what) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  if (t.bytes.size() / elem_type_size(t.type) != n ||
      t.bytes.size() % elem_type_size(t.type) != 0) {
    throw FormatError(what + ": " + std::to_string(t.bytes.size()) + " bytes do not hold shape " +
                      shape_str(t.shape) + " of " + elem_type_name(t.type));
  }
  Array out;
  out.shape = t.shape;
  out.dtype = array_dtype_for(t.type);
  out.data.resize(n);
  const bool narrow = t.type == ElemType::i64 || t.type == ElemType::u64;
  for (uint64_t i = 0; i < n; ++i) {
    double v = t.value(static_cast<int64_t>(i));
    if (narrow) {
      const uint8_t* p = t.bytes.data() + i * 8;
      bool fits = t.type == ElemType::i64
                      ? static_cast<int64_t>(data::load_le<uint64_t>(p)) ==
                            static_cast<int32_t>(data::load_le<uint64_t>(p))
                      : data::load_le<uint64_t>(p) <= std::numeric_limits<uint32_t>::max();
      if (!fits) {
        throw FormatError(what + ": element " + std::to_string(i) + " of " +
                          elem_type_name(t.type) + " does not fit in " + dtype_name(out.dtype));
      }
    }
    out.data[i] = v;
  }
  return out;
}

namespace {

template <typename Int>
Int checked_int(double v, size_t i, ElemType type, const std::string& what) {
  // Both bounds are powers of two (or zero), so they are exact as doubles.
  const double lo = static_cast<double>(std::numeric_limits<Int>::min());
  const double hi = std::ldexp(1.0, std::numeric_limits<Int>::digits);  // exclusive
  if (!(v == std::trunc(v) && v >= lo && v < hi)) {
    throw Error(what + ": value " + std::to_string(v) + " at element " + std::to_string(i) +
                " is not representable as " + elem_type_name(type));
  }
  return static_cast<Int>(v);
}

}  // namespace

RawTensor from_array(const Array& a, ElemType type, const std::string& what) {
  RawTensor out;
  out.type = type;
  out.shape = a.shape;
  const size_t w = elem_type_size(type);
  out.bytes.resize(a.data.size() * w);
  uint8_t* p = out.bytes.data();
  using data::store_le;
  for (size_t i = 0; i < a.data.size(); ++i, p += w) {
    const double v = a.data[i];
    switch (type) {
      case ElemType::boolean:
        if (v != 0.0 && v != 1.0) {
          throw Error(what + ": value " + std::to_string(v) + " at element " + std::to_string(i) +
                      " is not a BOOL (0 or 1)");
        }
        p[0] = v != 0.0;
        break;
      case ElemType::u8:
        p[0] = checked_int<uint8_t>(v, i, type, what);
        break;
      case ElemType::i8:
        p[0] = static_cast<uint8_t>(checked_int<int8_t>(v, i, type, what));
        break;
      case ElemType::i16:
        store_le(p, static_cast<uint16_t>(checked_int<int16_t>(v, i, type, what)));
        break;
      case ElemType::u16:
        store_le(p, checked_int<uint16_t>(v, i, type, what));
        break;
      case ElemType::i32:
        store_le(p, static_cast<uint32_t>(checked_int<int32_t>(v, i, type, what)));
        break;
      case ElemType::u32:
        store_le(p, checked_int<uint32_t>(v, i, type, what));
        break;
      case ElemType::i64:
        store_le(p, static_cast<uint64_t>(checked_int<int64_t>(v, i, type, what)));
        break;
      case ElemType::u64:
        store_le(p, checked_int<uint64_t>(v, i, type, what));
        break;
      case ElemType::f16:
        store_le(p, f16_bits(v));
        break;
      case ElemType::bf16:
        store_le(p, bf16_bits(v));
        break;
      case ElemType::f32:
        store_le(p, encode_ieee(v, 8, 23));
        break;
      case ElemType::f64:
        store_le(p, std::bit_cast<uint64_t>(v));
        break;
      case ElemType::f8_e4m3:
      case ElemType::f8_e5m2:
        throw Error(what + ": writing " + std::string(elem_type_name(type)) +
                    " is not supported (f8 types are read-only)");
    }
  }
  return out;
}

}  // namespace mn
