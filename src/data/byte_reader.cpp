#include "data/byte_reader.h"

#include <meganeura/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace mn::data {

struct ByteReader::Gzip {
  z_stream zs{};
  std::vector<uint8_t> in = std::vector<uint8_t>(1 << 16);
  bool ended = false;  // the last member ended and no input follows
  ~Gzip() { inflateEnd(&zs); }
};

namespace {

constexpr uint8_t kGzipMagic[2] = {0x1f, 0x8b};
// Deflate's densest code spends 2 bits on a copy of 258 bytes.
constexpr uint64_t kMaxDeflateRatio = 1032;

}  // namespace

ByteReader::ByteReader(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    throw FormatError(name() + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw FormatError(name() + ": cannot read: not a regular file");
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  uint8_t head[2] = {0, 0};
  ssize_t got = ::pread(fd_, head, 2, 0);
  if (got == 2 && head[0] == kGzipMagic[0] && head[1] == kGzipMagic[1]) {
    gz_ = std::make_unique<Gzip>();
    // 15 + 16: a gzip wrapper with a 32 KiB window; inflate checks the CRC-32 and length.
    if (inflateInit2(&gz_->zs, 15 + 16) != Z_OK) {
      ::close(fd_);
      fd_ = -1;
      throw FormatError(name() + ": cannot initialize zlib");
    }
  }
}

ByteReader::~ByteReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool ByteReader::compressed() const { return gz_ != nullptr; }

std::optional<uint64_t> ByteReader::remaining() const {
  if (gz_) return std::nullopt;
  return file_size_ - file_pos_ + (peeked_ ? 1 : 0);
}

uint64_t ByteReader::content_bound() const {
  if (!gz_) return file_size_;
  return file_size_ > UINT64_MAX / kMaxDeflateRatio ? UINT64_MAX : file_size_ * kMaxDeflateRatio;
}

size_t ByteReader::read_plain(uint8_t* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::read(fd_, dst + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      throw FormatError(name() + ": read error at byte " + std::to_string(file_pos_) + ": " +
                        std::strerror(errno));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
    file_pos_ += static_cast<uint64_t>(got);
  }
  return done;
}

size_t ByteReader::fill_input() {
  size_t got = read_plain(gz_->in.data(), gz_->in.size());
  gz_->zs.next_in = gz_->in.data();
  gz_->zs.avail_in = static_cast<uInt>(got);
  return got;
}

void ByteReader::ensure_input(size_t n) {
  z_stream& zs = gz_->zs;
  if (zs.avail_in >= n) return;
  const size_t kept = zs.avail_in;
  if (kept > 0) std::memmove(gz_->in.data(), zs.next_in, kept);
  const size_t got = read_plain(gz_->in.data() + kept, gz_->in.size() - kept);
  zs.next_in = gz_->in.data();
  zs.avail_in = static_cast<uInt>(kept + got);
}

size_t ByteReader::read_gzip(uint8_t* dst, size_t n) {
  Gzip& g = *gz_;
  z_stream& zs = g.zs;
  size_t done = 0;
  while (done < n && !g.ended) {
    if (zs.avail_in == 0 && fill_input() == 0) {
      throw FormatError(name() + ": truncated gzip stream: the file ends at compressed byte " +
                        std::to_string(file_pos_) + " (decompressed byte " +
                        std::to_string(offset_ + done) + ") before the end of the stream");
    }
    const size_t chunk = std::min<size_t>(n - done, 1u << 30);
    zs.next_out = dst + done;
    zs.avail_out = static_cast<uInt>(chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    done += chunk - zs.avail_out;
    const uint64_t compressed_at = file_pos_ - zs.avail_in;
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (concatenated .gz files are one stream).
      ensure_input(2);
      if (zs.avail_in == 0) {
        g.ended = true;
      } else if (zs.avail_in >= 2 && zs.next_in[0] == kGzipMagic[0] &&
                 zs.next_in[1] == kGzipMagic[1]) {
        inflateReset(&zs);
      } else {
        throw FormatError(name() + ": " + std::to_string(file_size_ - (file_pos_ - zs.avail_in)) +
                          " bytes of trailing garbage after the gzip stream at compressed byte " +
                          std::to_string(file_pos_ - zs.avail_in));
      }
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw FormatError(name() + ": gzip error near compressed byte " +
                        std::to_string(compressed_at) + ": " +
                        (zs.msg ? zs.msg : "zlib error " + std::to_string(rc)));
    }
  }
  return done;
}

size_t ByteReader::read(void* dst, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  if (n > 0 && peeked_) {
    out[0] = *peeked_;
    peeked_.reset();
    done = 1;
  }
  if (done < n) done += gz_ ? read_gzip(out + done, n - done) : read_plain(out + done, n - done);
  offset_ += done;
  return done;
}

void ByteReader::read_exact(void* dst, size_t n, const std::string& what) {
  const uint64_t start = offset_;
  size_t got = read(dst, n);
  if (got != n) {
    throw FormatError(name() + ": truncated at byte " + std::to_string(start + got) +
                      " while reading " + what + " (needed " + std::to_string(n) +
                      " bytes from byte " + std::to_string(start) + ", the content ended after " +
                      std::to_string(got) + ")");
  }
}

bool ByteReader::at_end() {
  if (peeked_) return false;
  uint8_t b;
  size_t got = gz_ ? read_gzip(&b, 1) : read_plain(&b, 1);
  if (got == 0) return true;
  peeked_ = b;
  return false;
}

}  // namespace mn::data
