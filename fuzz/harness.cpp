#include "harness.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace mn::fuzz {

namespace {
std::map<std::string, Harness>& registry() {
  static std::map<std::string, Harness> r;
  return r;
}
}  // namespace

const std::map<std::string, Harness>& harnesses() { return registry(); }

Registration::Registration(const char* parser, Harness harness) { registry()[parser] = harness; }

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

MemoryFile::MemoryFile(std::span<const uint8_t> data) {
  fd_ = memfd_create("mn-fuzz", MFD_CLOEXEC);
  require(fd_ >= 0, "memfd_create failed");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    require(n > 0, "writing the memory file failed");
    done += static_cast<size_t>(n);
  }
}

MemoryFile::~MemoryFile() { ::close(fd_); }

std::filesystem::path MemoryFile::path() const { return "/proc/self/fd/" + std::to_string(fd_); }

}  // namespace mn::fuzz
