#include "data/atomic_file.h"

#include <meganeura/error.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace mn::data {

namespace {

std::atomic<uint64_t> g_temp_counter{0};

constexpr int kMaxSymlinks = 40;  // as the kernel's ELOOP limit

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& why) {
  throw Error("cannot write '" + path.string() + "': " + why);
}

std::string describe_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// `path` with every symlink along the final component followed (the directories above are
// resolved by the kernel when the file is opened). A dangling link names the file to create.
std::filesystem::path resolve_symlinks(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  for (int hops = 0; hops <= kMaxSymlinks; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const std::filesystem::path link = std::filesystem::read_symlink(p, ec);
    if (ec) refuse(path, "cannot read the symlink '" + p.string() + "': " + ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  refuse(path, "more than " + std::to_string(kMaxSymlinks) + " symlinks to follow");
}

std::filesystem::path dir_of(const std::filesystem::path& p) {
  return p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Removes temporaries of `target` left by saves whose process no longer exists (killed while
// writing). Temporaries of live processes, ours included, may be saves in progress: kept.
void remove_stale_temps(const std::filesystem::path& target) {
  std::error_code ec;
  const std::string name = target.filename().string();
  for (std::filesystem::directory_iterator it(dir_of(target), ec), end; !ec && it != end;
       it.increment(ec)) {
    long pid = 0;
    if (!parse_temp_name(it->path().filename().string(), name, pid)) continue;
    if (pid == ::getpid() || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(it->path().c_str());
  }
}

}  // namespace

bool parse_temp_name(const std::string& name, const std::string& target_name, long& pid) {
  const std::string prefix = "." + target_name + ".tmp-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  const size_t dash = rest.find('-');
  if (dash == std::string::npos) return false;
  const std::string pid_text = rest.substr(0, dash), counter = rest.substr(dash + 1);
  if (!all_digits(pid_text) || !all_digits(counter) || pid_text.size() > 9) return false;
  pid = std::stol(pid_text);
  return true;
}

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  if (path_.filename().empty()) refuse(path_, "not a file name");
  target_ = resolve_symlinks(path_);
  if (target_.filename().empty()) refuse(path_, "the symlink names no file");
  const std::filesystem::path dir = dir_of(target_);
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0)
    refuse(path_, "directory '" + dir.string() + "': " + std::strerror(errno));
  if (!S_ISDIR(dst.st_mode)) refuse(path_, "'" + dir.string() + "' is not a directory");
  struct stat st {};
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    refuse(path_, (target_ == path_ ? std::string() : "its target '" + target_.string() + "' ") +
                      "is " + describe_kind(st.st_mode) + ", not a regular file");
  }
  remove_stale_temps(target_);
  // Hidden, unique per process and call; O_EXCL refuses to reuse a name. An existing target's
  // copy starts private and takes the target's permission bits before any byte is written.
  const mode_t create_mode = exists ? 0600 : 0666;
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_ = dir / ("." + target_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                   std::to_string(g_temp_counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, create_mode);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    refuse(path_,
           "cannot create a temporary file in '" + dir.string() + "': " + std::strerror(errno));
  }
  if (exists) {
    // Ownership follows where we may change it (root); otherwise the file becomes ours, as
    // with any program that replaces a file.
    if (st.st_uid != ::geteuid() || st.st_gid != ::getegid())
      (void)::fchown(fd_, st.st_uid, st.st_gid);
    if (::fchmod(fd_, st.st_mode & 07777) != 0) fail("cannot copy the permission bits");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::check_destination(const std::filesystem::path& path) {
  AtomicFile probe(path);  // creates and, uncommitted, removes its temporary file
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
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("rename failed");
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  int dfd = ::open(dir_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace mn::data
