#pragma once
// Compiled SPIR-V cached in memory and on disk, keyed by source + options + compiler version.
// Files are written to a temporary name and renamed, so processes may share the folder; each
// file repeats its full key and a checksum, so a damaged or colliding file is a miss.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codegen/shader/shader_compiler.h"

namespace mn::codegen {

struct ShaderSource {
  std::string source;
  CompileOptions options;
};

struct ShaderCacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t compiles = 0;
  uint64_t disk_writes = 0;
  uint64_t disk_errors = 0;  // files that could not be written, or were damaged
};

class ShaderCache {
 public:
  // <default_cache_dir()>/spirv, i.e. $MN_CACHE_DIR/spirv or ~/.cache/meganeura/spirv.
  static std::filesystem::path default_dir();

  explicit ShaderCache(std::filesystem::path dir = default_dir());

  // The SPIR-V of one shader: from memory, else from disk, else compiled and stored.
  // Compile errors throw ShaderCompileError.
  std::vector<uint32_t> get(std::string_view source, const CompileOptions& options);

  // Many shaders at once on `threads` threads (0: one per hardware thread). Results are in
  // the order of `shaders`; if any fails, the first failure (by position) is rethrown after
  // all have finished.
  std::vector<std::vector<uint32_t>> get_batch(std::span<const ShaderSource> shaders,
                                               unsigned threads = 0);

  ShaderCacheStats stats() const;
  const std::filesystem::path& dir() const { return dir_; }
  // The file that holds (or would hold) this shader.
  std::filesystem::path file_for(std::string_view source, const CompileOptions& options) const;

 private:
  struct Entry {
    std::string key;
    std::vector<uint32_t> spirv;
  };

  std::filesystem::path dir_;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Entry> memory_;
  std::atomic<uint64_t> memory_hits_{0}, disk_hits_{0}, compiles_{0}, disk_writes_{0},
      disk_errors_{0};
};

// The exact bytes that identify a compilation (the cache key before hashing).
std::string shader_cache_key(std::string_view source, const CompileOptions& options);

}  // namespace mn::codegen
