#pragma once
// Helpers for the data tests: scratch directories, raw file bytes and an independent gzip.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <meganeura/error.h>

#include "support/scratch_dir.h"

namespace mn::test {

inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  // A fresh file rather than a truncated one: ext4 flushes truncated-and-rewritten files on
  // close (auto_da_alloc), which makes thousands of small rewrites slow.
  std::error_code ec;
  std::filesystem::remove(p, ec);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << p;
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// gzip-wraps bytes with zlib directly, independently of the library's writer (level 0: stored,
// the size is the content's plus framing).
inline std::vector<uint8_t> gzip(const std::vector<uint8_t>& in, int level = 9) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<uint8_t*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Runs f and expects a FormatError whose message contains every one of `parts`.
inline void expect_format_error(const std::function<void()>& f,
                                const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no FormatError thrown (expected one mentioning '" << parts.front() << "')";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
    }
  }
}

}  // namespace mn::test
