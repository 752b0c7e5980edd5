// TensorProto -> RawTensor: the typed repeated fields, raw_data, and external data files.
#include "onnx_import/tensor_proto.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <limits>

#include <meganeura/onnx.h>

#include "data/bytes.h"

namespace mn::onnx {

namespace {

using P = ::onnx::TensorProto;

struct TypeEntry {
  int code;
  const char* name;
  ElemType type;
  bool supported;
};

constexpr TypeEntry kTypes[] = {
    {P::FLOAT, "FLOAT", ElemType::f32, true},
    {P::UINT8, "UINT8", ElemType::u8, true},
    {P::INT8, "INT8", ElemType::i8, true},
    {P::UINT16, "UINT16", ElemType::u16, true},
    {P::INT16, "INT16", ElemType::i16, true},
    {P::INT32, "INT32", ElemType::i32, true},
    {P::INT64, "INT64", ElemType::i64, true},
    {P::STRING, "STRING", ElemType::u8, false},
    {P::BOOL, "BOOL", ElemType::boolean, true},
    {P::FLOAT16, "FLOAT16", ElemType::f16, true},
    {P::DOUBLE, "DOUBLE", ElemType::f64, true},
    {P::UINT32, "UINT32", ElemType::u32, true},
    {P::UINT64, "UINT64", ElemType::u64, false},
    {P::COMPLEX64, "COMPLEX64", ElemType::f32, false},
    {P::COMPLEX128, "COMPLEX128", ElemType::f64, false},
    {P::BFLOAT16, "BFLOAT16", ElemType::bf16, true},
};

const TypeEntry* find_type(int code) {
  for (const auto& e : kTypes) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

// The external data entries of a tensor: location (relative to the model's folder), offset,
// length.
struct ExternalRef {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

uint64_t parse_u64(const std::string& s, const std::string& what, const char* key) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    throw FormatError(what + ": external_data '" + key + "' is '" + s + "', not a byte count");
  }
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    throw FormatError(what + ": external_data '" + key + "' " + s + " is out of range");
  }
}

ExternalRef external_ref(const P& t, const std::string& what) {
  ExternalRef r;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") r.location = kv.value();
    else if (kv.key() == "offset") r.offset = parse_u64(kv.value(), what, "offset");
    else if (kv.key() == "length") r.length = parse_u64(kv.value(), what, "length");
  }
  if (r.location.empty()) throw FormatError(what + ": external data without a 'location'");
  const std::filesystem::path loc(r.location);
  if (loc.is_absolute()) {
    throw FormatError(what + ": external data location '" + r.location +
                      "' is absolute; ONNX requires a path relative to the model file");
  }
  for (const auto& part : loc) {
    if (part == "..") {
      throw FormatError(what + ": external data location '" + r.location +
                        "' leaves the model's folder");
    }
  }
  return r;
}

std::vector<uint8_t> read_external(const P& t, const std::filesystem::path& dir, uint64_t expected,
                                   const std::string& what) {
  const ExternalRef r = external_ref(t, what);
  const std::filesystem::path file = dir / r.location;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(file, ec);
  if (ec) throw FormatError(what + ": cannot read external data file " + file.string() + ": " + ec.message());
  const uint64_t length = r.length.value_or(expected);
  if (length != expected) {
    throw FormatError(what + ": external data length " + std::to_string(length) + " in " +
                      file.string() + " is not the tensor's " + std::to_string(expected) + " bytes");
  }
  if (r.offset > size || size - r.offset < length) {
    throw FormatError(what + ": external data file " + file.string() + " has " +
                      std::to_string(size) + " bytes, fewer than offset " +
                      std::to_string(r.offset) + " + length " + std::to_string(length) +
                      " (truncated?)");
  }
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> bytes(length);
  in.seekg(static_cast<std::streamoff>(r.offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(length));
  if (!in) throw FormatError(what + ": reading external data from " + file.string() + " failed");
  return bytes;
}

// Elements stored in one of the typed repeated fields, encoded little-endian as `type`.
template <typename Field, typename Encode>
void encode_field(const Field& f, size_t width, std::vector<uint8_t>& out, Encode encode) {
  out.resize(static_cast<size_t>(f.size()) * width);
  for (int i = 0; i < f.size(); ++i) encode(out.data() + static_cast<size_t>(i) * width, f.Get(i));
}

std::vector<uint8_t> typed_field_bytes(const P& t, ElemType type, const std::string& what) {
  using data::store_le;
  std::vector<uint8_t> out;
  const size_t w = elem_type_size(type);
  switch (type) {
    case ElemType::f32:
      encode_field(t.float_data(), w, out, [](uint8_t* p, float v) { store_le(p, std::bit_cast<uint32_t>(v)); });
      break;
    case ElemType::f64:
      encode_field(t.double_data(), w, out, [](uint8_t* p, double v) { store_le(p, std::bit_cast<uint64_t>(v)); });
      break;
    case ElemType::i64:
      encode_field(t.int64_data(), w, out, [](uint8_t* p, int64_t v) { store_le(p, static_cast<uint64_t>(v)); });
      break;
    case ElemType::u32:
      encode_field(t.uint64_data(), w, out, [&](uint8_t* p, uint64_t v) {
        if (v > std::numeric_limits<uint32_t>::max()) throw FormatError(what + ": UINT32 element out of range");
        store_le(p, static_cast<uint32_t>(v));
      });
      break;
    case ElemType::i32:
      encode_field(t.int32_data(), w, out, [](uint8_t* p, int32_t v) { store_le(p, static_cast<uint32_t>(v)); });
      break;
    case ElemType::i16:
    case ElemType::u16:
    case ElemType::f16:
    case ElemType::bf16:
      // 16-bit types (and the bits of FLOAT16/BFLOAT16) travel in int32_data.
      encode_field(t.int32_data(), w, out, [](uint8_t* p, int32_t v) { store_le(p, static_cast<uint16_t>(v)); });
      break;
    case ElemType::i8:
    case ElemType::u8:
    case ElemType::boolean:
      encode_field(t.int32_data(), w, out, [](uint8_t* p, int32_t v) { p[0] = static_cast<uint8_t>(v); });
      break;
    default:
      throw UnsupportedError(what + ": element type " + elem_type_name(type) + " is not supported");
  }
  return out;
}

}  // namespace

ElemType elem_type_of(int onnx_type, const std::string& what) {
  const TypeEntry* e = find_type(onnx_type);
  if (e == nullptr) {
    throw FormatError(what + ": unknown ONNX element type code " + std::to_string(onnx_type));
  }
  if (!e->supported) {
    throw UnsupportedError(what + ": ONNX element type " + e->name + " is not supported");
  }
  return e->type;
}

DType graph_dtype_of(ElemType t, const std::string& what) {
  switch (t) {
    case ElemType::f32:
      return DType::f32;
    case ElemType::f16:
      return DType::f16;
    case ElemType::bf16:
      return DType::bf16;
    case ElemType::boolean:
      return DType::f32;
    case ElemType::u32:
      return DType::u32;
    case ElemType::i8:
    case ElemType::u8:
    case ElemType::i16:
    case ElemType::u16:
    case ElemType::i32:
    case ElemType::i64:
      return DType::i32;
    default:
      throw UnsupportedError(what + ": element type " + elem_type_name(t) +
                             " has no GPU representation (supported: FLOAT, FLOAT16, BFLOAT16, "
                             "integers up to 32 bits, INT64 within 32 bits, BOOL)");
  }
}

bool is_float_type(ElemType t) {
  return t == ElemType::f32 || t == ElemType::f16 || t == ElemType::bf16;
}

bool is_integer(ElemType t) {
  switch (t) {
    case ElemType::i8:
    case ElemType::u8:
    case ElemType::i16:
    case ElemType::u16:
    case ElemType::i32:
    case ElemType::u32:
    case ElemType::i64:
    case ElemType::u64:
      return true;
    default:
      return false;
  }
}

RawTensor tensor_from_proto(const P& t, const std::filesystem::path& dir, const std::string& what) {
  RawTensor out;
  out.type = elem_type_of(t.data_type(), what);
  for (int64_t d : t.dims()) {
    if (d < 0) throw FormatError(what + ": negative dimension " + std::to_string(d));
    out.shape.push_back(d);
  }
  if (t.has_segment()) throw UnsupportedError(what + ": segmented tensors are not supported");
  const uint64_t n = static_cast<uint64_t>(mn::numel(out.shape));
  const uint64_t expected = n * elem_type_size(out.type);
  if (t.data_location() == P::EXTERNAL) {
    out.bytes = read_external(t, dir, expected, what);
  } else if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    out.bytes.assign(raw.begin(), raw.end());
  } else {
    out.bytes = typed_field_bytes(t, out.type, what);
  }
  if (out.bytes.size() != expected) {
    throw FormatError(what + ": " + std::to_string(out.bytes.size()) + " bytes of data for shape " +
                      shape_str(out.shape) + " of " + elem_type_name(out.type) + " (" +
                      std::to_string(expected) + " expected)");
  }
  return out;
}

std::optional<size_t> first_outside_i32(const Array& a) {
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (a.data[i] < -2147483648.0 || a.data[i] > 2147483647.0) return i;
  }
  return std::nullopt;
}

Array host_array(const RawTensor& t) {
  Array a;
  a.shape = t.shape;
  a.dtype = t.type == ElemType::f64 ? DType::f32 : graph_dtype_of(t.type, "value");
  const int64_t n = t.numel();
  a.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a.data[static_cast<size_t>(i)] = t.value(i);
  return a;
}

}  // namespace mn::onnx
