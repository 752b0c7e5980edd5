#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "codegen/shader/shader_cache.h"
#include "support/scratch_dir.h"

namespace mn::codegen {
namespace {

std::string kernel(int variant) {
  return "#version 450\nlayout(local_size_x = 64) in;\n"
         "layout(set = 0, binding = 0) buffer B { float b[]; };\n"
         "void main() { b[gl_GlobalInvocationID.x] += " +
         std::to_string(variant) + ".0 * FACTOR; }\n";
}

CompileOptions with_factor(const std::string& factor) {
  CompileOptions options;
  options.macros = {{"FACTOR", factor}};
  return options;
}

TEST(ShaderCache, SecondCompileIsAHit) {
  const test::ScratchDir scratch("shader-cache-hit");
  const std::filesystem::path& dir = scratch.path();
  {
    ShaderCache cache(dir);
    const auto first = cache.get(kernel(1), with_factor("2.0"));
    EXPECT_EQ(cache.stats().compiles, 1u);
    EXPECT_EQ(cache.stats().disk_writes, 1u);
    EXPECT_TRUE(std::filesystem::exists(cache.file_for(kernel(1), with_factor("2.0"))));
    const auto second = cache.get(kernel(1), with_factor("2.0"));
    EXPECT_EQ(second, first);
    EXPECT_EQ(cache.stats().compiles, 1u);
    EXPECT_EQ(cache.stats().memory_hits, 1u);
    // Different options or source: a different entry.
    cache.get(kernel(1), with_factor("3.0"));
    cache.get(kernel(2), with_factor("2.0"));
    CompileOptions v13 = with_factor("2.0");
    v13.target = TargetEnv::vulkan_1_3;
    cache.get(kernel(1), v13);
    EXPECT_EQ(cache.stats().compiles, 4u);
  }
  // A new cache object (a new process) finds the files.
  ShaderCache again(dir);
  const auto from_disk = again.get(kernel(1), with_factor("2.0"));
  EXPECT_EQ(from_disk, compile_glsl(kernel(1), with_factor("2.0")));
  EXPECT_EQ(again.stats().disk_hits, 1u);
  EXPECT_EQ(again.stats().compiles, 0u);
}

TEST(ShaderCache, KeyCoversSourceOptionsAndCompiler) {
  const std::string key = shader_cache_key(kernel(1), with_factor("2.0"));
  EXPECT_NE(key.find(compiler_version()), std::string::npos);
  EXPECT_NE(key, shader_cache_key(kernel(1), with_factor("2.00")));
  CompileOptions plain = with_factor("2.0");
  plain.optimize = false;
  EXPECT_NE(key, shader_cache_key(kernel(1), plain));
  CompileOptions renamed = with_factor("2.0");
  renamed.name = "other";
  EXPECT_EQ(key, shader_cache_key(kernel(1), renamed));  // the name only labels messages
  // Macro boundaries are unambiguous.
  CompileOptions a, b;
  a.macros = {{"A", "1 B"}};
  b.macros = {{"A", "1"}, {"B", ""}};
  EXPECT_NE(shader_cache_key("x", a), shader_cache_key("x", b));
}

TEST(ShaderCache, DamagedFilesAreRecompiled) {
  const test::ScratchDir scratch("shader-cache-damaged");
  const std::filesystem::path& dir = scratch.path();
  const auto good = compile_glsl(kernel(5), with_factor("1.0"));
  std::filesystem::path file;
  {
    ShaderCache cache(dir);
    cache.get(kernel(5), with_factor("1.0"));
    file = cache.file_for(kernel(5), with_factor("1.0"));
  }
  // Truncate the file: the checksum no longer matches.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 10);
  {
    ShaderCache cache(dir);
    EXPECT_EQ(cache.get(kernel(5), with_factor("1.0")), good);
    EXPECT_EQ(cache.stats().disk_errors, 1u);
    EXPECT_EQ(cache.stats().compiles, 1u);
  }
  // Rewritten whole.
  ShaderCache cache(dir);
  EXPECT_EQ(cache.get(kernel(5), with_factor("1.0")), good);
  EXPECT_EQ(cache.stats().disk_hits, 1u);
}

TEST(ShaderCache, BatchCompilesInParallel) {
  const test::ScratchDir scratch("shader-cache-batch");
  const std::filesystem::path& dir = scratch.path();
  std::vector<ShaderSource> shaders;
  for (int i = 0; i < 12; ++i) shaders.push_back({kernel(i), with_factor("0.5")});
  ShaderCache cache(dir);
  const auto results = cache.get_batch(shaders, 4);
  ASSERT_EQ(results.size(), shaders.size());
  for (size_t i = 0; i < shaders.size(); ++i) {
    EXPECT_EQ(results[i], compile_glsl(shaders[i].source, shaders[i].options)) << i;
  }
  EXPECT_EQ(cache.stats().compiles, 12u);
  const auto again = cache.get_batch(shaders, 4);
  EXPECT_EQ(again, results);
  EXPECT_EQ(cache.stats().memory_hits, 12u);

  shaders[7].source = "#version 450\nvoid main() { nope(); }\n";
  EXPECT_THROW(cache.get_batch(shaders, 3), ShaderCompileError);
}

TEST(ShaderCache, ConcurrentProcessesShareTheFolder) {
  const test::ScratchDir scratch("shader-cache-concurrent");
  const std::filesystem::path& dir = scratch.path();
  const auto expected = compile_glsl(kernel(9), with_factor("4.0"));
  // Separate cache objects stand in for separate processes racing on the same files.
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> results(6);
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      ShaderCache cache(dir);
      for (int round = 0; round < 3; ++round) results[t] = cache.get(kernel(9), with_factor("4.0"));
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().extension(), ".spv") << entry.path();  // no temporary leftovers
    ++files;
  }
  EXPECT_EQ(files, 1u);
  ShaderCache reader(dir);
  EXPECT_EQ(reader.get(kernel(9), with_factor("4.0")), expected);
  EXPECT_EQ(reader.stats().disk_hits, 1u);
}

TEST(ShaderCache, UnwritableFolderStillCompiles) {
  // A path below a regular file can never be created.
  const test::ScratchDir scratch("shader-cache-unwritable");
  const std::filesystem::path& dir = scratch.path();
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  ShaderCache cache(dir / "file" / "spirv");
  EXPECT_EQ(cache.get(kernel(1), with_factor("1.0")), compile_glsl(kernel(1), with_factor("1.0")));
  EXPECT_EQ(cache.stats().disk_errors, 1u);
}

}  // namespace
}  // namespace mn::codegen
