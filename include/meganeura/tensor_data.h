#pragma once
// User data for any graph: named columns of samples (arrays, .npy files, safetensors), batched
// by a shuffling, prefetching loader whose order is a pure function of (seed, epoch).
//
//   auto data = mn::TensorDataset::from_npy({{"x", "images.npy"}, {"y", "labels.npy"}});
//   mn::TensorLoader loader(data, {.batch_size = 64, .seed = 1});
//   mn::TensorBatch b = loader.next();  // b.columns["x"]: [<=64, ...]
//
// A column keeps a device dtype (f32, f16, bf16, i32, u32): files' f64 values are rounded to
// f32, signed integers become i32 and unsigned ones u32 (values out of range are an error
// naming the file and element). Every malformed file raises mn::FormatError naming the file
// and what was wrong.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/data.h>
#include <meganeura/dtype.h>

namespace mn {

// Row-major elements of `dtype`; shape[0] is the number of samples (rows).
struct Column {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<std::byte> bytes;

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  // One sample's shape (shape without its first dimension) and byte size.
  Shape sample_shape() const { return Shape(shape.begin() + (shape.empty() ? 0 : 1), shape.end()); }
  size_t row_bytes() const;

  // The values as an Array (exact: every column dtype fits a double).
  Array to_array() const;
  // An Array's values encoded as `dtype` (default: the Array's), rounding floats to nearest
  // even; integers must be integral and in range (mn::Error naming `what` and the element).
  static Column from_array(const Array& a, std::optional<DType> dtype = std::nullopt,
                           const std::string& what = "array");
  // A file tensor as a column (see above for the dtype it gets); `what` names it in errors.
  static Column from_raw(const RawTensor& t, const std::string& what);
};

// .npy (NumPy's format, versions 1.0 to 3.0): little- and big-endian numbers of every size,
// bool, C and Fortran order. Fortran-order files are reordered to C order.
RawTensor read_npy(const std::filesystem::path& path);
// Writes `t` as .npy version 1.0 (C order, little-endian), atomically.
void write_npy(const std::filesystem::path& path, const RawTensor& t);

class TensorDataset {
 public:
  TensorDataset() = default;

  // Adds a column; mn::Error when the name is taken, empty, or its row count differs from the
  // columns already there (naming both), ShapeError for a 0-d column.
  void add(const std::string& name, Column column);
  void add(const std::string& name, const Array& values, std::optional<DType> dtype = std::nullopt);

  // Each file a column named by its key.
  static TensorDataset from_npy(const std::map<std::string, std::filesystem::path>& files);
  // The named tensors of a safetensors file (all of them when `names` is empty), each a column.
  static TensorDataset from_safetensors(const std::filesystem::path& path,
                                        const std::vector<std::string>& names = {});
  // A classification data set's inputs (f32, [N, sample_shape...]) and labels (i32, [N]).
  static TensorDataset from_dataset(const Dataset& d, const std::string& inputs = "x",
                                    const std::string& labels = "y");

  int64_t size() const { return rows_; }
  bool contains(const std::string& name) const { return columns_.count(name) != 0; }
  // mn::Error naming the column and the ones there are when absent.
  const Column& column(const std::string& name) const;
  const std::map<std::string, Column>& columns() const { return columns_; }
  std::vector<std::string> names() const;
  // Samples [begin, begin + count).
  TensorDataset slice(int64_t begin, int64_t count) const;

 private:
  std::map<std::string, Column> columns_;
  int64_t rows_ = 0;
};

struct TensorBatch {
  int64_t epoch = 0;
  int64_t step = 0;  // index of the batch inside its epoch
  int64_t rows = 0;  // samples in this batch (the last of an epoch may be short)
  std::vector<int64_t> indices;           // the data set rows, in batch order
  std::map<std::string, Column> columns;  // each [rows, ...]
};

struct TensorLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;       // the order of epoch e is a pure function of (seed, e)
  bool drop_last = false;  // drop the last partial batch of each epoch
  int64_t prefetch = 2;    // batches prepared ahead on a background thread; 0 = on next()
};

// An endless stream of batches, epoch after epoch, like DataLoader.
class TensorLoader {
 public:
  TensorLoader(std::shared_ptr<const TensorDataset> data, TensorLoaderOptions options = {});
  ~TensorLoader();
  TensorLoader(const TensorLoader&) = delete;
  TensorLoader& operator=(const TensorLoader&) = delete;

  int64_t batches_per_epoch() const;
  DataLoader::Position position() const;
  // The next batch; an exception of a failed batch repeats until seek().
  TensorBatch next();
  void seek(int64_t epoch, int64_t step = 0);
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const TensorDataset& dataset() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mn
