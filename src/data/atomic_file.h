#pragma once
// A file written in full or not at all: bytes go to a temporary file in the target's directory,
// and commit() fsyncs it, renames it over the target and fsyncs the directory. Destroying an
// uncommitted AtomicFile removes the temporary file, so a failed write leaves the old file (or
// nothing) in place, and a crash leaves at most a stray hidden temporary, never a half file.
//
// The target is what the path finally names: a symlink is followed and the file it points to is
// replaced (the link stays a link), an existing file keeps its permission bits, and anything
// that is not a regular file (directory, FIFO, device, socket) is refused, never replaced.
// Temporaries named as ours ("." + name + ".tmp-<pid>-<n>") whose process is gone are removed.
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
  // The file commit() replaces: `path` with every symlink followed.
  const std::filesystem::path& target() const { return target_; }

  // Throws the error a save to `path` would meet at its start (a missing or unwritable
  // directory, a target that is not a regular file), without touching the target.
  static void check_destination(const std::filesystem::path& path);

 private:
  void fail(const std::string& what) const;

  std::filesystem::path path_;    // as given, for messages
  std::filesystem::path target_;  // symlinks resolved
  std::filesystem::path temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Whether `name` is exactly a temporary file name AtomicFile uses for `target_name`, and if so
// the id of the process that made it.
bool parse_temp_name(const std::string& name, const std::string& target_name, long& pid);

}  // namespace mn::data
