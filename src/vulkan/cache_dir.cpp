#include "vulkan/cache_dir.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <meganeura/error.h>

namespace mn::vk {

std::filesystem::path default_cache_dir() {
  if (const char* dir = std::getenv("MN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "meganeura";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "meganeura";
  }
  return std::filesystem::temp_directory_path() / "meganeura-cache";
}

void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  static std::atomic<unsigned> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    throw Error("cannot create cache folder " + path.parent_path().string() + ": " + ec.message());
  }
  // The temporary name must be unique across processes (pid) and threads (counter).
  std::filesystem::path temp = path;
  temp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::FILE* file = std::fopen(temp.c_str(), "wb");
    if (!file) {
      throw Error("cannot write " + temp.string() + ": " + std::strerror(errno));
    }
    const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), file);
    const bool ok = written == bytes.size() && std::fflush(file) == 0;
    std::fclose(file);
    if (!ok) {
      std::filesystem::remove(temp, ec);
      throw Error("cannot write " + temp.string() + ": short write");
    }
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::filesystem::remove(temp, ec);
    throw Error("cannot rename a temporary file to " + path.string() + ": " + ec.message());
  }
}

std::optional<std::vector<std::byte>> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;
  in.seekg(0, std::ios::beg);
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) return std::nullopt;
  return bytes;
}

}  // namespace mn::vk
