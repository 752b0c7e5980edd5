#include "codegen/shader/shader_cache.h"

#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include "support/parallel_for.h"
#include "vulkan/cache_dir.h"

namespace mn::codegen {
namespace {

constexpr char kMagic[8] = {'M', 'N', 'S', 'P', 'I', 'R', 'V', '1'};

uint64_t fnv1a(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

void append_u64(std::vector<std::byte>& out, uint64_t v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

// File: magic, key length, key, word count, words, checksum of everything before it.
std::vector<std::byte> encode(const std::string& key, const std::vector<uint32_t>& spirv) {
  std::vector<std::byte> out;
  const auto* magic = reinterpret_cast<const std::byte*>(kMagic);
  out.insert(out.end(), magic, magic + sizeof kMagic);
  append_u64(out, key.size());
  const auto* k = reinterpret_cast<const std::byte*>(key.data());
  out.insert(out.end(), k, k + key.size());
  append_u64(out, spirv.size());
  const auto* w = reinterpret_cast<const std::byte*>(spirv.data());
  out.insert(out.end(), w, w + spirv.size() * sizeof(uint32_t));
  append_u64(out, fnv1a(out.data(), out.size()));
  return out;
}

// The SPIR-V if the file is whole and was written for exactly this key.
std::optional<std::vector<uint32_t>> decode(const std::vector<std::byte>& file,
                                            const std::string& key, bool& damaged) {
  damaged = true;
  size_t at = 0;
  auto read_u64 = [&](uint64_t& v) {
    if (file.size() - at < sizeof v) return false;
    std::memcpy(&v, file.data() + at, sizeof v);
    at += sizeof v;
    return true;
  };
  if (file.size() < sizeof kMagic + 8 * 3 || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    return std::nullopt;
  }
  uint64_t checksum = 0;
  std::memcpy(&checksum, file.data() + file.size() - 8, 8);
  if (checksum != fnv1a(file.data(), file.size() - 8)) return std::nullopt;
  at = sizeof kMagic;
  uint64_t key_size = 0, words = 0;
  if (!read_u64(key_size) || key_size > file.size() - at) return std::nullopt;
  damaged = false;
  if (key_size != key.size() || std::memcmp(file.data() + at, key.data(), key.size()) != 0) {
    return std::nullopt;  // a hash collision: someone else's shader
  }
  at += key_size;
  damaged = true;
  if (!read_u64(words) || words == 0 || file.size() - at < 8 ||
      words != (file.size() - at - 8) / 4) {
    return std::nullopt;
  }
  std::vector<uint32_t> spirv(words);
  std::memcpy(spirv.data(), file.data() + at, words * 4);
  damaged = false;
  return spirv;
}

}  // namespace

std::string shader_cache_key(std::string_view source, const CompileOptions& options) {
  std::string key = "meganeura-spirv-cache 1\n";
  key += "compiler " + compiler_version(options.compiler) + "\n";
  key += options.target == TargetEnv::vulkan_1_3 ? "target vulkan1.3\n" : "target vulkan1.2\n";
  key += options.optimize ? "optimize performance\n" : "optimize none\n";
  if (options.coop_khr) key += "cooperative matrix khr\n";  // absent: keys of older files hold
  for (const ShaderMacro& m : options.macros) {
    // Lengths make the encoding unambiguous whatever the names and values contain.
    key += "define " + std::to_string(m.name.size()) + ":" + m.name + " " +
           std::to_string(m.value.size()) + ":" + m.value + "\n";
  }
  key += "source " + std::to_string(source.size()) + "\n";
  key += source;
  return key;
}

std::filesystem::path ShaderCache::default_dir() { return vk::default_cache_dir() / "spirv"; }

ShaderCache::ShaderCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

std::filesystem::path ShaderCache::file_for(std::string_view source,
                                            const CompileOptions& options) const {
  const std::string key = shader_cache_key(source, options);
  return dir_ / (hex(fnv1a(key.data(), key.size())) + ".spv");
}

std::vector<uint32_t> ShaderCache::get(std::string_view source, const CompileOptions& options) {
  const std::string key = shader_cache_key(source, options);
  const uint64_t hash = fnv1a(key.data(), key.size());
  {
    std::lock_guard lock(mutex_);
    auto it = memory_.find(hash);
    if (it != memory_.end() && it->second.key == key) {
      ++memory_hits_;
      return it->second.spirv;
    }
  }
  const std::filesystem::path file = dir_ / (hex(hash) + ".spv");
  std::optional<std::vector<uint32_t>> spirv;
  if (auto bytes = vk::read_file(file)) {
    bool damaged = false;
    spirv = decode(*bytes, key, damaged);
    if (spirv) {
      ++disk_hits_;
    } else if (damaged) {
      ++disk_errors_;
    }
  }
  if (!spirv) {
    spirv = compile_glsl(source, options);
    ++compiles_;
    try {
      vk::write_file_atomic(file, encode(key, *spirv));
      ++disk_writes_;
    } catch (const Error&) {
      ++disk_errors_;  // a read-only cache only costs compile time
    }
  }
  std::lock_guard lock(mutex_);
  memory_[hash] = Entry{key, *spirv};
  return std::move(*spirv);
}

std::vector<std::vector<uint32_t>> ShaderCache::get_batch(std::span<const ShaderSource> shaders,
                                                          unsigned threads) {
  std::vector<std::vector<uint32_t>> results(shaders.size());
  support::parallel_for(shaders.size(), threads,
                        [&](size_t i) { results[i] = get(shaders[i].source, shaders[i].options); });
  return results;
}

ShaderCacheStats ShaderCache::stats() const {
  return {memory_hits_.load(), disk_hits_.load(), compiles_.load(), disk_writes_.load(),
          disk_errors_.load()};
}

}  // namespace mn::codegen
