#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <meganeura/data.h>
#include <meganeura/error.h>

#include "data/test_util.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using test::expect_format_error;
using test::ScratchDir;

using testing::ScopedEnv;

// A tiny MNIST-format pair: n images of rows x cols with pixel (i, p) = (i * 31 + p) % 256.
void write_tiny(const std::filesystem::path& dir, const std::string& prefix, int64_t n,
                int64_t rows, int64_t cols, int label_mod = 10) {
  RawTensor img{ElemType::u8, {n, rows, cols}, {}};
  for (int64_t i = 0; i < n * rows * cols; ++i) {
    img.bytes.push_back(static_cast<uint8_t>(((i / (rows * cols)) * 31 + i % (rows * cols)) % 256));
  }
  RawTensor lab{ElemType::u8, {n}, {}};
  for (int64_t i = 0; i < n; ++i) lab.bytes.push_back(static_cast<uint8_t>((i * 3) % label_mod));
  write_idx(dir / (prefix + "-images-idx3-ubyte.gz"), img);
  write_idx(dir / (prefix + "-labels-idx1-ubyte.gz"), lab);
}

TEST(Dataset, LoadsMnistFormatFromAnyDirectoryAndLayout) {
  ScratchDir dir;
  write_tiny(dir.path(), "train", 5, 3, 4);
  write_tiny(dir.path(), "t10k", 2, 3, 4);
  Dataset flat = load_fashion_mnist(Split::train, ImageLayout::flat, dir.path());
  EXPECT_EQ(flat.size(), 5);
  EXPECT_EQ(flat.sample_shape, (Shape{12}));
  EXPECT_EQ(flat.inputs_shape(), (Shape{5, 12}));
  EXPECT_EQ(flat.class_names, fashion_mnist_classes());
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(flat.labels[i], (i * 3) % 10);
    for (int64_t p = 0; p < 12; ++p) {
      EXPECT_EQ(flat.inputs[i * 12 + p], static_cast<float>((i * 31 + p) % 256) / 255.0f);
    }
  }
  Dataset nchw = load_fashion_mnist(Split::test, ImageLayout::nchw, dir.path());
  EXPECT_EQ(nchw.inputs_shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(nchw.labels, (std::vector<int32_t>{0, 3}));
}

TEST(Dataset, DirectoryComesFromArgumentThenEnvironmentThenPackage) {
  ScratchDir a, b;
  write_tiny(a.path(), "t10k", 3, 2, 2);
  write_tiny(b.path(), "t10k", 4, 2, 2);
  {
    ScopedEnv env("MN_FASHION_MNIST_DIR", b.path().string());
    EXPECT_EQ(fashion_mnist_dir(), b.path());
    EXPECT_EQ(load_fashion_mnist(Split::test).size(), 4);
    EXPECT_EQ(load_fashion_mnist(Split::test, ImageLayout::flat, a.path()).size(), 3);
    expect_format_error(
        [] { load_fashion_mnist(Split::train); },
        {"train-images-idx3-ubyte.gz", "MN_FASHION_MNIST_DIR", "dataset-fashion-mnist"});
  }
  ScopedEnv unset("MN_FASHION_MNIST_DIR", "");
  EXPECT_EQ(fashion_mnist_dir(), std::filesystem::path("/usr/share/datasets/fashion-mnist"));
  expect_format_error(
      [&] { load_fashion_mnist(Split::train, ImageLayout::flat, a.path() / "missing"); },
      {"Fashion-MNIST not found", "missing/train-images-idx3-ubyte.gz",
       "apt install dataset-fashion-mnist"});
}

TEST(Dataset, RejectsInconsistentPairs) {
  ScratchDir dir;
  write_tiny(dir.path(), "a", 4, 2, 2);
  write_tiny(dir.path(), "b", 3, 2, 2);
  write_tiny(dir.path(), "c", 3, 2, 2, /*label_mod=*/13);  // labels 0, 3, 6
  write_tiny(dir.path(), "d", 5, 2, 2, /*label_mod=*/13);  // labels ... 9, 12
  const std::string img = "-images-idx3-ubyte.gz", lab = "-labels-idx1-ubyte.gz";
  expect_format_error(
      [&] { load_idx_images(dir / ("a" + img), dir / ("b" + lab), ImageLayout::flat, {}); },
      {"3 labels for the 4 images"});
  expect_format_error(
      [&] { load_idx_images(dir / ("a" + lab), dir / ("a" + lab), ImageLayout::flat, {}); },
      {"expected u8 images [N, rows, cols]"});
  expect_format_error(
      [&] { load_idx_images(dir / ("a" + img), dir / ("a" + img), ImageLayout::flat, {}); },
      {"expected u8 labels [N]"});
  EXPECT_NO_THROW(load_idx_images(dir / ("c" + img), dir / ("c" + lab), ImageLayout::flat,
                                  fashion_mnist_classes()));
  expect_format_error(
      [&] {
        load_idx_images(dir / ("d" + img), dir / ("d" + lab), ImageLayout::flat,
                        fashion_mnist_classes());
      },
      {"label 12", "byte 12", "not one of the 10 classes"});
}

TEST(Dataset, SliceAndValidate) {
  Dataset d;
  d.sample_shape = {2};
  d.inputs = {0, 1, 2, 3, 4, 5};
  d.labels = {0, 1, 0};
  d.class_names = {"a", "b"};
  EXPECT_NO_THROW(d.validate());
  Dataset s = d.slice(1, 2);
  EXPECT_EQ(s.inputs, (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(s.labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(s.class_names, d.class_names);
  EXPECT_EQ(d.slice(3, 0).size(), 0);
  EXPECT_THROW(d.slice(2, 2), Error);
  EXPECT_THROW(d.slice(-1, 1), Error);
  Dataset bad = d;
  bad.labels[2] = 2;
  EXPECT_THROW(bad.validate(), Error);
  bad = d;
  bad.inputs.pop_back();
  EXPECT_THROW(bad.validate(), Error);
}

// The real data set, from the Debian package dataset-fashion-mnist. Loaded once for the suite.
class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path dir = "/usr/share/datasets/fashion-mnist";
    if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) return;
    train_ = new Dataset(load_fashion_mnist(Split::train, ImageLayout::flat, dir));
    test_ = new Dataset(load_fashion_mnist(Split::test, ImageLayout::nchw, dir));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
    train_ = test_ = nullptr;
  }
  void SetUp() override {
    if (!train_) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  static Dataset* train_;
  static Dataset* test_;
};
Dataset* FashionMnist::train_ = nullptr;
Dataset* FashionMnist::test_ = nullptr;

// Expected values computed with numpy straight from the .gz files:
//   lab = np.frombuffer(gzip.open(p + '-labels-idx1-ubyte.gz').read()[8:], np.uint8)
//   img = np.frombuffer(gzip.open(p + '-images-idx3-ubyte.gz').read()[16:], np.uint8)
//   lab[:12], np.bincount(lab), img.reshape(len(lab), -1).sum(1)[:3], img.sum()
TEST_F(FashionMnist, TrainSplit) {
  const Dataset& d = *train_;
  EXPECT_EQ(d.inputs_shape(), (Shape{60000, 784}));
  EXPECT_EQ(d.class_names.size(), 10u);
  EXPECT_EQ(d.class_names[9], "Ankle boot");
  EXPECT_EQ(std::vector<int32_t>(d.labels.begin(), d.labels.begin() + 12),
            (std::vector<int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}));
  std::vector<int64_t> histogram(10, 0);
  for (int32_t l : d.labels) histogram.at(static_cast<size_t>(l))++;
  EXPECT_EQ(histogram, std::vector<int64_t>(10, 6000));
  EXPECT_EQ(*std::min_element(d.inputs.begin(), d.inputs.end()), 0.0f);
  EXPECT_EQ(*std::max_element(d.inputs.begin(), d.inputs.end()), 1.0f);
  double total = 0, first = 0;
  for (size_t i = 0; i < d.inputs.size(); ++i) total += std::round(d.inputs[i] * 255.0);
  for (size_t i = 0; i < 784; ++i) first += std::round(d.inputs[i] * 255.0);
  EXPECT_EQ(first, 76247.0);
  EXPECT_EQ(total, 3431114169.0);
  EXPECT_EQ(d.inputs[96], 1.0f / 255.0f);
  EXPECT_EQ(d.inputs[99], 13.0f / 255.0f);
}

TEST_F(FashionMnist, TestSplitInNchw) {
  const Dataset& d = *test_;
  EXPECT_EQ(d.inputs_shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(std::vector<int32_t>(d.labels.begin(), d.labels.begin() + 12),
            (std::vector<int32_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}));
  std::vector<int64_t> histogram(10, 0);
  for (int32_t l : d.labels) histogram.at(static_cast<size_t>(l))++;
  EXPECT_EQ(histogram, std::vector<int64_t>(10, 1000));
  double total = 0;
  for (float v : d.inputs) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
    total += std::round(v * 255.0);
  }
  EXPECT_EQ(total, 573469082.0);
  EXPECT_EQ(d.inputs[215], 3.0f / 255.0f);
}

}  // namespace
}  // namespace mn
