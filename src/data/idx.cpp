// IDX files (the MNIST format): magic 00 00 <type> <rank>, big-endian u32 dimensions, then
// big-endian elements, optionally gzip-compressed.
#include <meganeura/data.h>
#include <meganeura/error.h>

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "data/atomic_file.h"
#include "data/byte_reader.h"
#include "data/bytes.h"

namespace mn {

namespace {

std::optional<ElemType> idx_type(uint8_t code) {
  switch (code) {
    case 0x08:
      return ElemType::u8;
    case 0x09:
      return ElemType::i8;
    case 0x0B:
      return ElemType::i16;
    case 0x0C:
      return ElemType::i32;
    case 0x0D:
      return ElemType::f32;
    case 0x0E:
      return ElemType::f64;
    default:
      return std::nullopt;
  }
}

uint8_t idx_code(ElemType t) {
  switch (t) {
    case ElemType::u8:
      return 0x08;
    case ElemType::i8:
      return 0x09;
    case ElemType::i16:
      return 0x0B;
    case ElemType::i32:
      return 0x0C;
    case ElemType::f32:
      return 0x0D;
    case ElemType::f64:
      return 0x0E;
    default:
      throw Error(std::string("IDX cannot store ") + elem_type_name(t) +
                  " (only U8, I8, I16, I32, F32, F64)");
  }
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", p[i]);
    s += (i ? " " : "") + std::string(buf);
  }
  return s;
}

std::vector<uint8_t> gzip_compress(const std::vector<uint8_t>& in, const std::string& what) {
  if (in.size() > 0xffffffffu) throw Error(what + ": more than 4 GiB is not supported with gzip");
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw Error(what + ": cannot initialize zlib");
  }
  std::vector<uint8_t> out(deflateBound(&zs, in.size()));
  zs.next_in = const_cast<uint8_t*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END)
    throw Error(what + ": gzip compression failed (" + std::to_string(rc) + ")");
  return out;
}

}  // namespace

namespace {

// An IDX header, checked against the file's size where that is known without reading it.
struct IdxHeader {
  RawTensor tensor;     // type and shape, no bytes
  uint64_t header = 0;  // bytes before the data
  uint64_t need = 0;    // data bytes the dimensions describe
  std::string what;     // "dims [..] of U8", for messages
};

IdxHeader read_header(data::ByteReader& r) {
  const std::string file = r.name();
  uint8_t magic[4];
  r.read_exact(magic, 4, "the IDX magic number");
  const std::optional<ElemType> type = idx_type(magic[2]);
  if (magic[0] != 0 || magic[1] != 0 || !type) {
    throw FormatError(file + ": bad IDX magic number " + hex_bytes(magic, 4) +
                      " at byte 0 (expected 00 00 <type> <rank> with type 08 u8, 09 i8, 0b i16, "
                      "0c i32, 0d f32 or 0e f64)");
  }
  IdxHeader h;
  h.tensor.type = *type;
  const int rank = magic[3];
  std::vector<uint8_t> dims(4 * static_cast<size_t>(rank));
  r.read_exact(dims.data(), dims.size(), std::to_string(rank) + " dimension sizes");
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = data::load_be<uint32_t>(dims.data() + 4 * i);
    h.tensor.shape.push_back(d);
    overflow = overflow || data::mul_overflow(count, d, &count);
  }
  const size_t width = elem_type_size(h.tensor.type);
  overflow = overflow || data::mul_overflow(count, width, &h.need) || h.need > (uint64_t{1} << 62);
  h.header = 4 + dims.size();
  h.what = "dims " + shape_str(h.tensor.shape) + " of " + elem_type_name(h.tensor.type);
  if (overflow) {
    throw FormatError(file + ": " + h.what + " (header of " + std::to_string(h.header) +
                      " bytes) describe more data than any file holds");
  }
  if (auto left = r.remaining(); left && *left != h.need) {
    throw FormatError(file + ": " + h.what + " need " + std::to_string(h.need) +
                      " data bytes after the " + std::to_string(h.header) +
                      "-byte header, but the file has " + std::to_string(*left) + " (" +
                      std::to_string(h.header + *left) + " bytes in all)");
  }
  return h;
}

// Reads `bytes` data bytes. Compressed content is read in growing chunks, so a forged size
// cannot force a huge allocation before the data is actually there.
void read_data(data::ByteReader& r, const IdxHeader& h, uint64_t bytes, RawTensor& t) {
  if (r.remaining()) t.bytes.reserve(bytes);
  while (t.bytes.size() < bytes) {
    const size_t at = t.bytes.size();
    const uint64_t chunk = std::clamp<uint64_t>(at, uint64_t{1} << 16, uint64_t{64} << 20);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, bytes - at));
    t.bytes.resize(at + n);
    const size_t got = r.read(t.bytes.data() + at, n);
    if (got != n) {
      throw FormatError(r.name() + ": truncated data: " + h.what + " need " +
                        std::to_string(h.need) + " data bytes after the " +
                        std::to_string(h.header) + "-byte header, but the content ends at byte " +
                        std::to_string(h.header + at + got) + " after " + std::to_string(at + got));
    }
  }
}

}  // namespace

IdxInfo read_idx_info(const std::filesystem::path& path) {
  data::ByteReader r(path);
  IdxHeader h = read_header(r);
  return {h.tensor.type, h.tensor.shape};
}

RawTensor read_idx(const std::filesystem::path& path, std::optional<int64_t> max_rows) {
  if (max_rows && *max_rows < 1) {
    throw Error(path.string() + ": read_idx: max_rows is " + std::to_string(*max_rows) +
                ", expected >= 1");
  }
  data::ByteReader r(path);
  IdxHeader h = read_header(r);
  RawTensor t = std::move(h.tensor);
  uint64_t bytes = h.need;
  const bool partial = max_rows && !t.shape.empty() && *max_rows < t.shape[0];
  if (partial) {  // only the rows asked for: the rest is neither read nor decompressed
    bytes = h.need / static_cast<uint64_t>(t.shape[0]) * static_cast<uint64_t>(*max_rows);
    t.shape[0] = *max_rows;
  }
  if (r.compressed() && bytes > r.content_bound() - std::min(r.content_bound(), h.header)) {
    throw FormatError(r.name() + ": " + h.what + " need " + std::to_string(bytes) + " data bytes" +
                      (partial ? " for the first " + std::to_string(t.shape[0]) + " rows" : "") +
                      ", but a gzip file of " + std::to_string(r.file_size()) +
                      " bytes decompresses to at most " + std::to_string(r.content_bound()));
  }
  read_data(r, h, bytes, t);
  if (!partial && !r.at_end()) {
    throw FormatError(r.name() + ": " + h.what + " need " + std::to_string(h.need) +
                      " data bytes, but the content continues past byte " +
                      std::to_string(h.header + h.need));
  }
  data::swap_elements(t.bytes.data(), t.bytes.size(), elem_type_size(t.type));
  return t;
}

void write_idx(const std::filesystem::path& path, const RawTensor& t) {
  const std::string what = "write_idx '" + path.string() + "'";
  const uint8_t code = idx_code(t.type);
  if (t.shape.size() > 255)
    throw Error(what + ": rank " + std::to_string(t.shape.size()) + " > 255");
  for (int64_t d : t.shape) {
    if (d < 0 || d > 0xffffffffLL) {
      throw Error(what + ": dimension " + std::to_string(d) + " of " + shape_str(t.shape) +
                  " does not fit an IDX u32");
    }
  }
  const size_t width = elem_type_size(t.type);
  if (t.bytes.size() != static_cast<uint64_t>(t.numel()) * width) {
    throw Error(what + ": " + std::to_string(t.bytes.size()) + " bytes do not hold " +
                shape_str(t.shape) + " of " + elem_type_name(t.type));
  }
  std::vector<uint8_t> out(4 + 4 * t.shape.size());
  out[2] = code;
  out[3] = static_cast<uint8_t>(t.shape.size());
  for (size_t i = 0; i < t.shape.size(); ++i) {
    data::store_be(out.data() + 4 + 4 * i, static_cast<uint32_t>(t.shape[i]));
  }
  const size_t header = out.size();
  out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  data::swap_elements(out.data() + header, t.bytes.size(), width);  // little -> big-endian
  if (path.extension() == ".gz") out = gzip_compress(out, what);
  data::AtomicFile f(path);
  f.write(out.data(), out.size());
  f.commit();
}

}  // namespace mn
