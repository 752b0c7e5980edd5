// Checkpoint writes go through symlinks to the file they name, keep its permission bits, refuse
// what is not a regular file, and clear temporaries left by killed saves (only ours).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include <meganeura/data.h>

#include "data/atomic_file.h"
#include "data/test_util.h"

namespace mn {
namespace {

using test::read_bytes;
using test::ScratchDir;
namespace fs = std::filesystem;

void write_text(const fs::path& p, const std::string& text) {
  data::AtomicFile f(p);
  f.write(text.data(), text.size());
  f.commit();
}

std::string read_text(const fs::path& p) {
  auto b = read_bytes(p);
  return {b.begin(), b.end()};
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode;
}

// Runs f and expects an mn::Error whose message contains `part`.
template <class F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, WritesThroughSymlinkChains) {
  ScratchDir dir;
  fs::create_directories(dir / "real");
  write_text(dir / "real/ckpt", "old");
  fs::create_symlink("real/ckpt", dir / "mid");   // relative to the link's directory
  fs::create_symlink(dir / "mid", dir / "link");  // absolute
  write_text(dir / "link", "new");
  EXPECT_TRUE(fs::is_symlink(dir / "link"));
  EXPECT_TRUE(fs::is_symlink(dir / "mid"));
  EXPECT_EQ(read_text(dir / "real/ckpt"), "new");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"link", "mid", "real"}));

  // A dangling link names the file to create.
  fs::create_symlink("real/fresh", dir / "dangling");
  write_text(dir / "dangling", "made");
  EXPECT_TRUE(fs::is_symlink(dir / "dangling"));
  EXPECT_EQ(read_text(dir / "real/fresh"), "made");

  fs::create_symlink("loop_b", dir / "loop_a");
  fs::create_symlink("loop_a", dir / "loop_b");
  expect_error([&] { write_text(dir / "loop_a", "x"); }, "symlinks");
}

// A character device to write to: a null device of our own in `dir` where we may make one (as
// root), so that a regression replaces nothing outside the scratch directory; otherwise
// /dev/null, which a process that cannot make devices cannot replace either.
fs::path test_device(const fs::path& dir) {
  const fs::path own = dir / "null";
  if (::mknod(own.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) return own;
  return "/dev/null";
}

TEST(AtomicFile, RefusesWhatIsNotARegularFile) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  expect_error([&] { write_text(dir / "fifo", "x"); }, "is a FIFO");
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  fs::create_symlink(dir / "fifo", dir / "to_fifo");
  expect_error([&] { write_text(dir / "to_fifo", "x"); }, "is a FIFO");

  fs::create_directories(dir / "sub");
  expect_error([&] { write_text(dir / "sub", "x"); }, "is a directory");
  EXPECT_TRUE(fs::is_directory(dir / "sub"));

  const fs::path device = test_device(dir.path());
  expect_error([&] { write_text(device, "x"); }, "is a character device");
  EXPECT_TRUE(fs::is_character_file(device));
  fs::create_symlink(device, dir / "to_null");
  expect_error([&] { write_text(dir / "to_null", "x"); },
               "'" + device.string() + "' is a character device");

  const fs::path sock = dir / "sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.string().size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  expect_error([&] { write_text(sock, "x"); }, "is a socket");
  ::close(fd);

  expect_error([&] { write_text(dir / "no/such/ckpt", "x"); }, "no/such");
  std::vector<std::string> expected = {"fifo", "sock", "sub", "to_fifo", "to_null"};
  if (device.parent_path() == dir.path()) expected.insert(expected.begin() + 1, "null");
  EXPECT_EQ(dir.listing(), expected);
}

TEST(AtomicFile, KeepsTheTargetsPermissionBits) {
  ScratchDir dir;
  for (mode_t mode : {mode_t{0600}, mode_t{0640}, mode_t{0604}}) {
    const fs::path p = dir / ("m" + std::to_string(mode));
    write_text(p, "old");
    ASSERT_EQ(::chmod(p.c_str(), mode), 0);
    write_text(p, "new");
    EXPECT_EQ(mode_of(p) & 07777, mode) << p;
    EXPECT_EQ(read_text(p), "new");
  }
  // A new file gets the usual 0666 less the umask.
  const mode_t mask = ::umask(022);
  write_text(dir / "fresh", "x");
  ::umask(mask);
  EXPECT_EQ(mode_of(dir / "fresh") & 07777, mode_t{0644});
}

// The id of a process that has exited (and been reaped).
long dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(AtomicFile, RemovesOnlyItsOwnStaleTemporaries) {
  ScratchDir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string mine = std::to_string(::getpid());
  const std::vector<std::string> stale = {".c.st.tmp-" + dead + "-0", ".c.st.tmp-" + dead + "-17"};
  const std::vector<std::string> kept = {
      ".c.st.tmp-" + mine + "-999999",  // a save of this process may be in progress
      ".c.st.tmp-1-3",                  // init is alive
      ".c.st.tmp-" + dead + "-1.bak",
      ".c.st.tmp-" + dead + "-",
      ".c.st.tmp-" + dead,
      "c.st.tmp-" + dead + "-1",
      ".d.st.tmp-" + dead + "-1",
      ".c.st.tmp-x" + dead + "-1",
      ".c.stx.tmp-" + dead + "-1"};
  for (const auto& n : stale) write_text(dir / n, "stale");
  for (const auto& n : kept) write_text(dir / n, "kept");
  write_text(dir / "c.st", "data");
  for (const auto& n : stale) EXPECT_FALSE(fs::exists(dir / n)) << n;
  for (const auto& n : kept) EXPECT_EQ(read_text(dir / n), "kept") << n;
}

TEST(AtomicFile, ParsesOnlyItsExactTemporaryNames) {
  long pid = 0;
  EXPECT_TRUE(data::parse_temp_name(".w.bin.tmp-123-4", "w.bin", pid));
  EXPECT_EQ(pid, 123);
  for (const char* other : {".w.bin.tmp-123-", ".w.bin.tmp--4", ".w.bin.tmp-1a-4", "w.bin.tmp-1-4",
                            ".w.bin.tmp-1-4-5", ".w.bin.tmp-1-4x", ".w.bin.tmp-1234567890-1"}) {
    EXPECT_FALSE(data::parse_temp_name(other, "w.bin", pid)) << other;
  }
}

TEST(AtomicFile, CheckDestinationTouchesNothing) {
  ScratchDir dir;
  write_text(dir / "c", "old");
  ASSERT_EQ(::chmod((dir / "c").c_str(), 0600), 0);
  data::AtomicFile::check_destination(dir / "c");
  data::AtomicFile::check_destination(dir / "new");
  EXPECT_EQ(read_text(dir / "c"), "old");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"c"}));
  expect_error([&] { data::AtomicFile::check_destination(dir / "missing/c"); }, "missing");
  expect_error([&] { data::AtomicFile::check_destination(dir.path()); }, "directory");
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir / "ro");
    ASSERT_EQ(::chmod((dir / "ro").c_str(), 0500), 0);
    expect_error([&] { data::AtomicFile::check_destination(dir / "ro/c"); }, "Permission denied");
    ::chmod((dir / "ro").c_str(), 0700);
  }
}

}  // namespace
}  // namespace mn
