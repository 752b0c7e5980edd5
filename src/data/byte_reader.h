#pragma once
// Sequential reading of a file that may be gzip-compressed, with offsets for error messages.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace mn::data {

class ByteReader {
 public:
  // Opens `path`; when it starts with the gzip magic its content is gunzipped as it is read.
  // Throws FormatError when the file cannot be opened.
  explicit ByteReader(const std::filesystem::path& path);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the (decompressed) content.
  size_t read(void* dst, size_t n);
  // Reads exactly n bytes or throws FormatError "<file>: truncated ... while reading <what>".
  void read_exact(void* dst, size_t n, const std::string& what);
  // True when no byte is left (reads ahead one byte to know, for gzip).
  bool at_end();

  uint64_t offset() const { return offset_; }  // in the decompressed content
  bool compressed() const;
  // Bytes left after offset(), known without reading for plain files only.
  std::optional<uint64_t> remaining() const;
  // The most bytes the content can hold, known without reading: the file's size, or for gzip
  // deflate's largest expansion (1032 output bytes per compressed byte) of the file's size.
  // A size declared past it is a lie that can be refused before anything is allocated.
  uint64_t content_bound() const;
  uint64_t file_size() const { return file_size_; }  // on disk (compressed)
  std::string name() const { return path_.string(); }

 private:
  struct Gzip;
  size_t read_plain(uint8_t* dst, size_t n);
  size_t read_gzip(uint8_t* dst, size_t n);
  size_t fill_input();
  // At least `n` unread compressed bytes in the input buffer when the file still has them
  // (the unread ones kept): a gzip magic number may straddle two reads.
  void ensure_input(size_t n);

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t file_pos_ = 0;  // bytes of the file consumed
  uint64_t offset_ = 0;
  std::unique_ptr<Gzip> gz_;
  std::optional<uint8_t> peeked_;
};

}  // namespace mn::data
