#pragma once
// Shared setup for the Vulkan tests: one validated device per test suite, a private cache
// folder, and the rule that every test ends with zero validation messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/shader/shader_compiler.h"
#include "vulkan/device.h"

namespace mn::vk::testing {

inline std::filesystem::path temp_cache_dir(const std::string& name) {
  const char* base = std::getenv("MN_CACHE_DIR");
  std::filesystem::path root =
      base && *base ? std::filesystem::path(base) : std::filesystem::temp_directory_path();
  auto dir = root / ("vulkan-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

inline DeviceOptions validated_options(const std::filesystem::path& cache_dir) {
  DeviceOptions options;
  options.validation = true;  // also when the test binary runs outside ctest
  options.cache_dir = cache_dir;
  return options;
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  return text;
}

// A GLSL compute shader compiled for `device`'s Vulkan version.
inline std::vector<uint32_t> compile_for(const Device& device, const std::string& glsl,
                                         const std::string& name) {
  codegen::CompileOptions options;
  options.name = name;
  options.target = codegen::target_env_for(device.capabilities().api_version);
  return codegen::compile_glsl(glsl, options);
}

class VulkanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cache_dir_ = new std::filesystem::path(temp_cache_dir("suite"));
    device_ = new Device(validated_options(*cache_dir_));
  }
  static void TearDownTestSuite() {
    delete device_;
    device_ = nullptr;
    std::filesystem::remove_all(*cache_dir_);
    delete cache_dir_;
  }
  void TearDown() override {
    EXPECT_TRUE(device_->validation_enabled());
    EXPECT_EQ(device_->validation_message_count(), 0u) << joined(device_->validation_messages());
  }
  static Device& device() { return *device_; }

  static std::vector<uint32_t> compile(const std::string& glsl, const std::string& name) {
    return compile_for(*device_, glsl, name);
  }

 private:
  static inline Device* device_ = nullptr;
  static inline std::filesystem::path* cache_dir_ = nullptr;
};

inline std::vector<uint32_t> random_words(size_t count, uint64_t seed) {
  std::vector<uint32_t> words(count);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& w : words) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    w = static_cast<uint32_t>(state >> 16);
  }
  return words;
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <class T>
std::span<std::byte> writable_bytes_of(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

}  // namespace mn::vk::testing
