#pragma once
// A file written in full or not at all: bytes go to a temporary file in the target's directory,
// and commit() fsyncs it, renames it over the target and fsyncs the directory. Destroying an
// uncommitted AtomicFile removes the temporary file, so a failed write leaves the old file (or
// nothing) in place, and a crash leaves at most a stray hidden temporary, never a half file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace mn::data {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);  // throws mn::Error
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void commit();
  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  void fail(const std::string& what) const;

  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace mn::data
