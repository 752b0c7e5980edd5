// `mn train` and `mn inspect` as a user runs them: bad option values are errors naming the
// option and the value (never replaced by a default), a save destination is checked before
// training, and a checkpoint is written through a symlink with the target's permissions.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/image.h>

#include "data/test_util.h"
#include "support/run_command.h"

#include "support/scratch_dir.h"

namespace mn {
namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string output;  // stdout and stderr
};

Result run_mn(const std::vector<std::string>& args) {
  const test::CommandResult r = test::run_mn(args);
  return {r.exit_code, r.out + r.err};
}

void expect_failure(const std::vector<std::string>& args, const std::vector<std::string>& parts) {
  Result r = run_mn(args);
  std::string line;
  for (const auto& a : args) line += a + " ";
  EXPECT_EQ(r.rc, 1) << line << "\n" << r.output;
  for (const auto& p : parts)
    EXPECT_NE(r.output.find(p), std::string::npos) << line << ": '" << p << "' not in\n"
                                                   << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

// A Fashion-MNIST-shaped folder of `n` random images per split.
void write_tiny_fashion_mnist(const fs::path& dir, int64_t n) {
  std::mt19937 rng(11);
  for (const std::string split : {"train", "t10k"}) {
    RawTensor images{ElemType::u8, {n, 28, 28}, std::vector<uint8_t>(static_cast<size_t>(n * 784))};
    for (auto& b : images.bytes) b = static_cast<uint8_t>(rng());
    RawTensor labels{ElemType::u8, {n}, std::vector<uint8_t>(static_cast<size_t>(n))};
    for (auto& b : labels.bytes) b = static_cast<uint8_t>(rng() % 10);
    write_idx(dir / (split + "-images-idx3-ubyte.gz"), images);
    write_idx(dir / (split + "-labels-idx1-ubyte.gz"), labels);
  }
}

TEST(Cli, UnknownCommandIsNamed) {
  expect_failure({"frobnicate"}, {"unknown command 'frobnicate'", "train"});
}

TEST(Cli, BadTrainOptionValuesAreErrors) {
  const std::vector<std::pair<std::string, std::string>> bad = {{"--lr", "nan"},
                                                                {"--lr", "0"},
                                                                {"--lr", "-1"},
                                                                {"--lr", "inf"},
                                                                {"--lr", "1e300"},
                                                                {"--weight-decay", "nan"},
                                                                {"--weight-decay", "-0.5"},
                                                                {"--clip-grad-norm", "-1"},
                                                                {"--clip-grad-norm", "nan"},
                                                                {"--limit", "0"},
                                                                {"--limit", "-1"},
                                                                {"--warmup", "-5"},
                                                                {"--momentum", "1"},
                                                                {"--momentum", "nan"},
                                                                {"--momentum", "-0.1"},
                                                                {"--epochs", "0"},
                                                                {"--batch", "0"},
                                                                {"--accumulate", "0"},
                                                                {"--precision", "i32"},
                                                                {"--precision", "fp16"}};
  for (const auto& [option, value] : bad)
    expect_failure({"train", option, value}, {option + " " + value});
}

// Mixed precision from the command line: the run trains (its products in bf16) and reports.
TEST(Cli, TrainsInBf16) {
  test::ScratchDir dir("cli-test");
  write_tiny_fashion_mnist(dir.path(), 40);
  Result r = run_mn({"train", "--data", dir.path().string(), "--batch", "16", "--limit", "32",
                     "--precision", "bf16", "--json"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("\"steps\":2"), std::string::npos) << r.output;
}

TEST(Cli, BadInspectOptionValuesAreErrors) {
  expect_failure({"inspect", "mlp", "--batch", "0"}, {"--batch 0"});
  expect_failure({"inspect", "transformer", "--layers", "-2"}, {"--layers -2"});
}

TEST(Cli, SaveDestinationIsCheckedBeforeLoadingData) {
  test::ScratchDir dir("cli-test");
  // No data folder: the save is refused before the data is looked for.
  const std::string no_data = (dir / "no-data").string();
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  expect_failure({"train", "--data", no_data, "--save", (dir / "fifo").string()}, {"is a FIFO"});
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  expect_failure({"train", "--data", no_data, "--save", (dir / "none/c").string()}, {"none"});
  // A null device of our own where we may make one (root), so that a regression cannot replace
  // the system's /dev/null; a process that cannot make devices cannot replace /dev/null either.
  fs::path device = dir / "null";
  if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) device = "/dev/null";
  expect_failure({"train", "--data", no_data, "--save", device.string()}, {"character device"});
  EXPECT_TRUE(fs::is_character_file(device));
}

TEST(Cli, RunLengthChecksNeedTheDataSize) {
  test::ScratchDir dir("cli-test");
  write_tiny_fashion_mnist(dir.path(), 32);  // 2 batches of 16 per epoch
  const std::string data = dir.path().string();
  expect_failure({"train", "--data", data, "--batch", "16", "--accumulate", "3"},
                 {"--accumulate 3", "2 batches"});
  expect_failure({"train", "--data", data, "--batch", "16", "--accumulate", "2000000000"},
                 {"--accumulate 2000000000"});
  expect_failure({"train", "--data", data, "--batch", "16", "--epochs", "9223372036854775807"},
                 {"--epochs 9223372036854775807"});
}

TEST(Cli, TrainSavesThroughASymlinkKeepingPermissions) {
  test::ScratchDir dir("cli-test");
  write_tiny_fashion_mnist(dir.path(), 32);
  {
    std::FILE* f = std::fopen((dir / "real.safetensors").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  ASSERT_EQ(::chmod((dir / "real.safetensors").c_str(), 0600), 0);
  fs::create_symlink("real.safetensors", dir / "link.safetensors");
  Result r = run_mn({"train", "--data", dir.path().string(), "--batch", "16", "--save",
                     (dir / "link.safetensors").string(), "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir / "link.safetensors"));
  struct stat st {};
  ASSERT_EQ(::stat((dir / "real.safetensors").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, mode_t{0600});
  SafetensorsReader saved(dir / "real.safetensors");
  EXPECT_EQ(saved.metadata().at("global_step"), "2");

  // The finished run cannot be resumed without more epochs; with one more it trains 2 steps.
  expect_failure({"train", "--data", dir.path().string(), "--batch", "16", "--resume",
                  (dir / "link.safetensors").string()},
                 {"nothing left to train"});
  r = run_mn({"train", "--data", dir.path().string(), "--batch", "16", "--epochs", "2", "--resume",
              (dir / "link.safetensors").string(), "--json"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("\"steps\":4"), std::string::npos) << r.output;
}

// Files declaring two million images but holding 40: --limit reads the first 32 and no more.
TEST(Cli, LimitReadsOnlyTheSamplesItUses) {
  test::ScratchDir dir("cli-test");
  write_tiny_fashion_mnist(dir.path(), 40);
  for (const std::string split : {"train", "t10k"}) {
    for (const std::string kind : {"images-idx3", "labels-idx1"}) {
      const fs::path p = dir / (split + "-" + kind + "-ubyte.gz");
      RawTensor t = read_idx(p);
      // The same content under a header whose count is raised to 2,000,000.
      std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(t.shape.size())};
      for (size_t i = 0; i < t.shape.size(); ++i) {
        const uint32_t d = i == 0 ? 2'000'000u : static_cast<uint32_t>(t.shape[i]);
        for (int shift = 24; shift >= 0; shift -= 8)
          bytes.push_back(static_cast<uint8_t>(d >> shift));
      }
      bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
      test::write_bytes(p, test::gzip(bytes));
    }
  }
  Result r = run_mn({"train", "--data", dir.path().string(), "--batch", "16", "--limit", "32"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("(32 train, 32 test)"), std::string::npos) << r.output;
  // The declared 2,000,000 images would take 1.5 GB as bytes and 6 GB as floats; the run (the
  // largest child this test has waited for) stays far below.
  rusage usage{};
  ASSERT_EQ(getrusage(RUSAGE_CHILDREN, &usage), 0);
  EXPECT_LT(usage.ru_maxrss, 1L << 20)
      << "peak resident set of mn train: " << usage.ru_maxrss << " KiB";
  expect_failure({"train", "--data", dir.path().string(), "--batch", "16"},
                 {"2000000", "decompresses to at most"});
}

// The DDPM U-Net from the command line: two steps of training, three images sampled by DDPM into
// a 2 x 2 grid of 28 x 28 tiles (2 black pixels between and around them), the weights saved
// under diffusers' names.
TEST(Cli, TrainsAUnetAndWritesItsSamples) {
  test::ScratchDir dir("cli-test");
  write_tiny_fashion_mnist(dir.path(), 8);
  const fs::path png = dir / "samples.png", weights = dir / "unet.safetensors";
  const test::CommandResult r = test::run_mn({"train",
                                              "--model",
                                              "unet",
                                              "--data",
                                              dir.path().string(),
                                              "--batch",
                                              "4",
                                              "--limit",
                                              "8",
                                              "--sampler",
                                              "ddpm",
                                              "--sampling-steps",
                                              "2",
                                              "--samples",
                                              "3",
                                              "--sample-png",
                                              png.string(),
                                              "--save",
                                              weights.string(),
                                              "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["sampled"], 3);
  EXPECT_EQ(j["sampler"], "ddpm");
  const double loss = j["final_loss"];
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  const Image grid = read_image(png);
  ASSERT_EQ(grid.width, 62);
  ASSERT_EQ(grid.height, 62);
  auto gray = [&](int64_t x, int64_t y) {
    return grid.pixels[static_cast<size_t>((y * 62 + x) * 3)];
  };
  std::set<uint8_t> first_tile;
  for (int64_t y = 2; y < 30; ++y) {
    for (int64_t x = 2; x < 30; ++x) first_tile.insert(gray(x, y));
  }
  EXPECT_GT(first_tile.size(), 8u) << "the first sample is (nearly) one shade";
  for (int64_t i = 0; i < 62; ++i) {
    EXPECT_EQ(gray(i, 0), 0);
    EXPECT_EQ(gray(0, i), 0);
    EXPECT_EQ(gray(i, 30), 0);   // between the rows
    EXPECT_EQ(gray(40, 40), 0);  // the fourth tile: no sample
  }
  const SafetensorsReader saved(weights);
  EXPECT_EQ(saved.entry("conv_in.weight").shape, (Shape{32, 1, 3, 3}));
  EXPECT_EQ(saved.entry("conv_out.weight").shape, (Shape{1, 32, 3, 3}));
  EXPECT_TRUE(saved.contains("mid_block.attentions.0.to_q.weight"));
}

TEST(Cli, BadUnetOptionsAreErrors) {
  const std::vector<std::vector<std::string>> bad = {{"--sampler", "euler"},
                                                     {"--sampling-steps", "0"},
                                                     {"--sampling-steps", "1001"},
                                                     {"--samples", "-1"},
                                                     {"--samples", "1025"}};
  for (const auto& option : bad)
    expect_failure({"train", "--model", "unet", option[0], option[1]},
                   {option[0] + " " + option[1]});
  expect_failure({"train", "--samples", "4"}, {"--samples 4", "only with --model unet"});
  expect_failure({"train", "--model", "cnn", "--sampler", "ddim"},
                 {"--sampler", "only with --model unet"});
  expect_failure({"train", "--model", "unet", "--resume", "x.safetensors"},
                 {"--resume", "--model unet"});
  // The run's length against the data's 2 batches per epoch (the short third one dropped).
  test::ScratchDir dir("cli-test");
  write_tiny_fashion_mnist(dir.path(), 10);
  const std::string data = dir.path().string();
  expect_failure({"train", "--model", "unet", "--data", data, "--batch", "4", "--epochs",
                  "9223372036854775807"},
                 {"--epochs 9223372036854775807", "2 batches per epoch"});
  expect_failure({"train", "--model", "unet", "--data", data, "--batch", "4", "--accumulate", "3"},
                 {"--accumulate 3", "2 batches"});
  expect_failure({"train", "--model", "unet", "--data", data, "--batch", "16"},
                 {"10 images are fewer than a batch of 16"});
}

}  // namespace
}  // namespace mn
