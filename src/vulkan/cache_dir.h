#pragma once
// Where compiled shaders and pipeline caches live, and how files there are written so that
// several processes may share the folder: write a private temporary file, then rename it.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

namespace mn::vk {

// $MN_CACHE_DIR, else $XDG_CACHE_HOME/meganeura, else ~/.cache/meganeura.
std::filesystem::path default_cache_dir();

// Creates the parent folders, writes to a temporary name unique to this process and thread,
// and renames it over `path`: readers see either the old file or the whole new one.
// Throws mn::Error naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);

// The whole file, or nullopt if it does not exist or cannot be read.
std::optional<std::vector<std::byte>> read_file(const std::filesystem::path& path);

}  // namespace mn::vk
