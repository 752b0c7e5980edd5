// NumPy's .npy format: "\x93NUMPY", a version, a header length (2 bytes in 1.0, 4 in 2.0 and
// 3.0), a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, then
// the elements. Read with ByteReader (gzip transparently, offsets in errors).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include <meganeura/error.h>
#include <meganeura/tensor_data.h>

#include "data/atomic_file.h"
#include "data/byte_reader.h"
#include "data/bytes.h"

namespace mn {

namespace {

struct NpyHeader {
  ElemType type = ElemType::f32;
  bool big_endian = false;
  bool fortran_order = false;
  Shape shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string text, std::string file) : s_(std::move(text)), file_(std::move(file)) {}

  NpyHeader parse() {
    NpyHeader h;
    bool descr = false, order = false, shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        descr_to_type(string_literal(), h);
        descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        shape = true;
      } else {
        fail("unknown key '" + key + "'");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    if (!descr || !order || !shape) fail("the header lacks 'descr', 'fortran_order' or 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(file_ + ": .npy header " + what + " (header: " + s_ + ")");
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool peek(char c) {
    skip_space();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "' at character " + std::to_string(i_));
    ++i_;
  }
  std::string string_literal() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) {
      fail("expected a string at character " + std::to_string(i_) +
           " (structured dtypes are not supported)");
    }
    const char quote = s_[i_++];
    const size_t end = s_.find(quote, i_);
    if (end == std::string::npos) fail("has an unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (s_.compare(i_, std::strlen(word), word) == 0) {
        i_ += std::strlen(word);
        return value;
      }
    }
    fail("expected True or False at character " + std::to_string(i_));
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    while (!peek(')')) {
      skip_space();
      int64_t v = 0;
      size_t digits = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (v > (INT64_MAX - 9) / 10) fail("has a dimension past int64");
        v = v * 10 + (s_[i_++] - '0');
        ++digits;
      }
      if (digits == 0) fail("expected a dimension at character " + std::to_string(i_));
      shape.push_back(v);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return shape;
  }
  void descr_to_type(const std::string& d, NpyHeader& h) {
    if (d.size() < 3 || (d[0] != '<' && d[0] != '>' && d[0] != '|' && d[0] != '=')) {
      fail("descr '" + d + "' is not a plain number type");
    }
    h.big_endian = d[0] == '>';
    static const std::pair<const char*, ElemType> kinds[] = {
        {"b1", ElemType::boolean}, {"i1", ElemType::i8},   {"i2", ElemType::i16},
        {"i4", ElemType::i32},     {"i8", ElemType::i64},  {"u1", ElemType::u8},
        {"u2", ElemType::u16},     {"u4", ElemType::u32},  {"u8", ElemType::u64},
        {"f2", ElemType::f16},     {"f4", ElemType::f32},  {"f8", ElemType::f64},
    };
    for (const auto& [code, type] : kinds) {
      if (d.compare(1, std::string::npos, code) == 0) {
        h.type = type;
        return;
      }
    }
    fail("descr '" + d + "' is not supported (bool, integers of 1-8 bytes, f2, f4, f8 are)");
  }

  std::string s_;
  std::string file_;
  size_t i_ = 0;
};

// C-order bytes from Fortran-order ones: element (i0, ..., ik) sits at Σ i_j·∏_{l<j} d_l.
std::vector<uint8_t> fortran_to_c(const std::vector<uint8_t>& f, const Shape& shape, size_t w) {
  std::vector<uint8_t> c(f.size());
  const int64_t n = numel(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {  // i walks C order; index is its multi-index
    int64_t offset = 0, stride = 1;
    for (size_t j = 0; j < shape.size(); ++j) {
      offset += index[j] * stride;
      stride *= shape[j];
    }
    std::memcpy(c.data() + i * w, f.data() + offset * w, w);
    for (size_t j = shape.size(); j-- > 0;) {
      if (++index[j] < shape[j]) break;
      index[j] = 0;
    }
  }
  return c;
}

}  // namespace

RawTensor read_npy(const std::filesystem::path& path) {
  data::ByteReader in(path);
  const std::string file = path.string();
  uint8_t magic[8];
  in.read_exact(magic, 8, "the .npy magic and version");
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    throw FormatError(file + ": not a .npy file (no \\x93NUMPY magic at offset 0)");
  }
  const int major = magic[6];
  if (major < 1 || major > 3) {
    throw FormatError(file + ": .npy version " + std::to_string(major) + "." +
                      std::to_string(magic[7]) + " is not supported (1.0 to 3.0 are)");
  }
  uint32_t header_len = 0;
  if (major == 1) {
    uint8_t b[2];
    in.read_exact(b, 2, "the header length");
    header_len = data::load_le<uint16_t>(b);
  } else {
    uint8_t b[4];
    in.read_exact(b, 4, "the header length");
    header_len = data::load_le<uint32_t>(b);
  }
  if (header_len > in.content_bound()) {
    throw FormatError(file + ": header length " + std::to_string(header_len) +
                      " is past the end of the file");
  }
  std::string text(header_len, '\0');
  in.read_exact(text.data(), header_len, "the header");
  const NpyHeader h = HeaderParser(text, file).parse();

  RawTensor t;
  t.type = h.type;
  t.shape = h.shape;
  const size_t w = elem_type_size(h.type);
  const int64_t n = numel(t.shape);  // ShapeError past int64
  if (static_cast<uint64_t>(n) > in.content_bound() / w) {
    throw FormatError(file + ": shape " + shape_str(t.shape) + " of " + elem_type_name(h.type) +
                      " needs " + std::to_string(static_cast<uint64_t>(n) * w) +
                      " bytes, more than the file holds");
  }
  t.bytes.resize(static_cast<size_t>(n) * w);
  in.read_exact(t.bytes.data(), t.bytes.size(), "the elements of shape " + shape_str(t.shape));
  if (h.big_endian && w > 1) {
    for (size_t i = 0; i < t.bytes.size(); i += w) std::reverse(&t.bytes[i], &t.bytes[i] + w);
  }
  if (h.fortran_order && t.shape.size() > 1) t.bytes = fortran_to_c(t.bytes, t.shape, w);
  return t;
}

void write_npy(const std::filesystem::path& path, const RawTensor& t) {
  static const std::pair<ElemType, const char*> descrs[] = {
      {ElemType::boolean, "|b1"}, {ElemType::i8, "|i1"},   {ElemType::i16, "<i2"},
      {ElemType::i32, "<i4"},     {ElemType::i64, "<i8"},  {ElemType::u8, "|u1"},
      {ElemType::u16, "<u2"},     {ElemType::u32, "<u4"},  {ElemType::u64, "<u8"},
      {ElemType::f16, "<f2"},     {ElemType::f32, "<f4"},  {ElemType::f64, "<f8"},
  };
  const char* descr = nullptr;
  for (const auto& [type, d] : descrs) {
    if (type == t.type) descr = d;
  }
  if (!descr) {
    throw Error("write_npy '" + path.string() + "': NumPy has no " + elem_type_name(t.type) +
                " type (write it as f32)");
  }
  if (t.bytes.size() != static_cast<size_t>(t.numel()) * elem_type_size(t.type)) {
    throw Error("write_npy '" + path.string() + "': " + std::to_string(t.bytes.size()) +
                " bytes do not hold shape " + shape_str(t.shape) + " of " +
                elem_type_name(t.type));
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 || i + 1 < t.shape.size() ? "," : "");
    if (i + 1 < t.shape.size()) shape += ' ';
  }
  shape += ")";
  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Padded with spaces and a newline so the elements start at a multiple of 64 bytes.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) throw Error("write_npy '" + path.string() + "': shape too long");
  std::string prefix("\x93NUMPY\x01\x00", 8);
  prefix += static_cast<char>(header.size() & 0xff);
  prefix += static_cast<char>(header.size() >> 8);
  data::AtomicFile f(path);
  f.write(prefix.data(), prefix.size());
  f.write(header.data(), header.size());
  f.write(t.bytes.data(), t.bytes.size());
  f.commit();
}

}  // namespace mn
