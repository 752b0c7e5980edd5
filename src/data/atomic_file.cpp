#include "data/atomic_file.h"

#include <meganeura/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace mn::data {

namespace {

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  if (path_.filename().empty()) throw Error("cannot write '" + path_.string() + "': not a file");
  const std::filesystem::path dir = path_.parent_path();
  // Hidden, unique per process and call; O_EXCL refuses to reuse a stale name.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_ = dir / ("." + path_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                   std::to_string(g_temp_counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    throw Error("cannot write '" + path_.string() + "': cannot create a temporary file in '" +
                (dir.empty() ? std::string(".") : dir.string()) + "': " + std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const std::string& what) const {
  throw Error("cannot write '" + path_.string() + "': " + what + " (at byte " +
              std::to_string(written_) + "): " + std::strerror(errno));
}

void AtomicFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t got = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("write failed");
    if (got == 0) {
      errno = ENOSPC;
      fail("write made no progress");
    }
    p += got;
    n -= static_cast<size_t>(got);
    written_ += static_cast<uint64_t>(got);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync failed");
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close failed");
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename failed");
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  const std::filesystem::path dir = path_.parent_path().empty() ? "." : path_.parent_path();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace mn::data
