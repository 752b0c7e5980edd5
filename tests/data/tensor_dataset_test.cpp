// Columns and data sets for the Trainer: conversions from files, row checks, slices, and the
// TensorLoader's batches (every sample once per epoch, the DataLoader's order, exact seeks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include <meganeura/tensor_data.h>

#include "data/test_util.h"

namespace mn {
namespace {

using test::ScratchDir;

const std::filesystem::path kNpy = std::filesystem::path(MN_SOURCE_DIR) / "tests/data/fixtures/npy";

Array iota(Shape shape, DType dtype, double start = 0) {
  Array a(shape, dtype);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = start + static_cast<double>(i);
  return a;
}

TEST(TensorDataset, ColumnsFromFilesTakeDeviceDtypes) {
  const TensorDataset d = TensorDataset::from_npy(
      {{"f8", kNpy / "f8.npy"}, {"i8", kNpy / "i8.npy"}, {"u1", kNpy / "u1.npy"},
       {"f2", kNpy / "f2.npy"}, {"b1", kNpy / "b1.npy"}});
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.column("f8").dtype, DType::f32);
  EXPECT_EQ(d.column("i8").dtype, DType::i32);
  EXPECT_EQ(d.column("u1").dtype, DType::u32);
  EXPECT_EQ(d.column("f2").dtype, DType::f16);
  EXPECT_EQ(d.column("b1").dtype, DType::u32);
  EXPECT_EQ(d.column("f8").sample_shape(), (Shape{4, 5}));
  const Array i8 = d.column("i8").to_array();
  const Array f8 = d.column("f8").to_array();
  for (int64_t i = 0; i < 60; ++i) {
    ASSERT_EQ(i8.data[static_cast<size_t>(i)], static_cast<double>(i % 23 - 7));
    ASSERT_EQ(f8.data[static_cast<size_t>(i)], static_cast<double>(i % 23 - 7));
  }
  // u8 holds NumPy's wrapped negatives, past u32: an error naming the file and element.
  try {
    TensorDataset::from_npy({{"u8", kNpy / "u8.npy"}});
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("u8.npy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("element 0"), std::string::npos) << e.what();
  }
  // f64 values round to f32 to nearest.
  RawTensor t;
  t.type = ElemType::f64;
  t.shape = {1};
  t.bytes.resize(8);
  const double third = 1.0 / 3.0;
  std::memcpy(t.bytes.data(), &third, 8);
  EXPECT_EQ(Column::from_raw(t, "third").to_array().data[0], static_cast<double>(1.0f / 3.0f));
}

TEST(TensorDataset, RowsMustAgreeAndNamesAreChecked) {
  TensorDataset d;
  d.add("x", iota({4, 2}, DType::f32));
  EXPECT_THROW(d.add("x", iota({4}, DType::i32)), Error);
  EXPECT_THROW(d.add("", iota({4}, DType::i32)), Error);
  EXPECT_THROW(d.add("s", Array::scalar(1)), ShapeError);
  try {
    d.add("y", iota({5}, DType::i32));
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'y' has 5 samples, column 'x' has 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(d.add("y", iota({4}, DType::f32, 0.5), DType::i32), Error);  // not integral
  d.add("y", iota({4}, DType::i32));
  try {
    d.column("z");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x', 'y'"), std::string::npos) << e.what();
  }
  const TensorDataset s = d.slice(1, 2);
  EXPECT_EQ(s.size(), 2);
  EXPECT_EQ(s.column("x").to_array().data, (std::vector<double>{2, 3, 4, 5}));
  EXPECT_EQ(s.column("y").to_array().data, (std::vector<double>{1, 2}));
  EXPECT_THROW(d.slice(3, 2), Error);
}

TEST(TensorDataset, FromSafetensorsAndFromADataset) {
  ScratchDir dir("tensor-dataset");
  save_safetensors(dir / "d.safetensors",
                   {{"x", iota({6, 3}, DType::f32)}, {"y", iota({6}, DType::i32)}});
  const TensorDataset all = TensorDataset::from_safetensors(dir / "d.safetensors");
  EXPECT_EQ(all.names(), (std::vector<std::string>{"x", "y"}));
  const TensorDataset one = TensorDataset::from_safetensors(dir / "d.safetensors", {"y"});
  EXPECT_EQ(one.names(), std::vector<std::string>{"y"});
  EXPECT_THROW(TensorDataset::from_safetensors(dir / "d.safetensors", {"z"}), FormatError);

  Dataset c;
  c.sample_shape = {2};
  c.inputs = {1, 2, 3, 4, 5, 6};
  c.labels = {0, 1, 2};
  const TensorDataset d = TensorDataset::from_dataset(c, "images", "labels");
  EXPECT_EQ(d.column("images").shape, (Shape{3, 2}));
  EXPECT_EQ(d.column("images").to_array().data, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(d.column("labels").dtype, DType::i32);
}

TEST(TensorLoader, BatchesFollowTheDataLoadersOrderAndSeekExactly) {
  const int64_t n = 10;
  auto d = std::make_shared<TensorDataset>();
  d->add("x", iota({n, 3}, DType::f32));
  d->add("y", iota({n}, DType::i32));
  TensorLoader loader(d, {.batch_size = 4, .seed = 7});
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  // The same order as the DataLoader's for the same seed.
  auto c = std::make_shared<Dataset>();
  c->sample_shape = {1};
  c->inputs.assign(n, 0);
  c->labels.assign(n, 0);
  DataLoader classic(c, {.batch_size = 4, .seed = 7});
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(loader.epoch_order(e), classic.epoch_order(e));

  std::vector<TensorBatch> first;
  for (int i = 0; i < 6; ++i) first.push_back(loader.next());
  for (int64_t e = 0; e < 2; ++e) {
    std::set<int64_t> seen;
    for (int i = 0; i < 3; ++i) {
      const TensorBatch& b = first[static_cast<size_t>(e * 3 + i)];
      EXPECT_EQ(b.epoch, e);
      EXPECT_EQ(b.rows, i < 2 ? 4 : 2);
      const Array x = b.columns.at("x").to_array(), y = b.columns.at("y").to_array();
      for (int64_t r = 0; r < b.rows; ++r) {
        const int64_t row = b.indices[static_cast<size_t>(r)];
        seen.insert(row);
        EXPECT_EQ(y.data[static_cast<size_t>(r)], row);
        EXPECT_EQ(x.data[static_cast<size_t>(r * 3 + 2)], row * 3 + 2);
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  }
  EXPECT_NE(first[0].indices, first[3].indices);  // reshuffled per epoch
  loader.seek(1, 1);
  const TensorBatch again = loader.next();
  EXPECT_EQ(again.indices, first[4].indices);
  EXPECT_EQ(loader.position(), (DataLoader::Position{1, 2}));
  EXPECT_THROW(loader.seek(0, 4), Error);

  TensorLoader dropping(d, {.batch_size = 4, .drop_last = true, .prefetch = 0});
  EXPECT_EQ(dropping.batches_per_epoch(), 2);
  EXPECT_THROW(TensorLoader(d, {.batch_size = 11, .drop_last = true}), Error);
  EXPECT_THROW(TensorLoader(std::make_shared<TensorDataset>(), {}), Error);
}

}  // namespace
}  // namespace mn
