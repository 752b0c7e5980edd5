#pragma once
// Data on disk and in batches: IDX files (MNIST, Fashion-MNIST), safetensors (checkpoints and
// weights), in-memory data sets and a shuffling, prefetching DataLoader.
//
// Every malformed or missing file raises mn::FormatError naming the file and the byte offset or
// field that was wrong; a failed write raises mn::Error and leaves any previous file intact.
#include <meganeura/array.h>
#include <meganeura/dtype.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mn {

// ---------------------------------------------------------------------------------------------
// Element types of files on disk. IDX supports u8, i8, i16, i32, f32 and f64; safetensors all.

enum class ElemType : uint8_t {
  boolean,
  u8,
  i8,
  i16,
  u16,
  i32,
  u32,
  i64,
  u64,
  f16,
  bf16,
  f32,
  f64,
  f8_e4m3,
  f8_e5m2,
};

// The safetensors spelling: "BOOL", "U8", ..., "F8_E4M3".
const char* elem_type_name(ElemType t);
// Parses the safetensors spelling; throws FormatError for an unknown name.
ElemType elem_type_from_name(const std::string& name);
size_t elem_type_size(ElemType t);

// Exact IEEE conversions: encoding rounds to nearest, ties to even, straight from double (no
// double rounding through f32); overflow gives infinity, NaN stays NaN with its sign.
uint16_t f16_bits(double v);
double f16_value(uint16_t bits);
uint16_t bf16_bits(double v);
double bf16_value(uint16_t bits);

// A tensor as stored in a file: row-major elements, each in little-endian byte order.
struct RawTensor {
  ElemType type = ElemType::f32;
  Shape shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const { return mn::numel(shape); }
  // Element i as a double (exact for every type except 64-bit integers beyond 2^53).
  double value(int64_t i) const;
};

// The Array dtype a file type is read as: floats keep their dtype (f64 and f8 read as f32 with
// their values unrounded), signed integers become i32 and unsigned ones u32 (values outside
// those ranges are an error when converting).
DType array_dtype_for(ElemType t);
// The file type an Array dtype is written as by default.
ElemType elem_type_for(DType t);
// Converts a raw tensor to an Array; `what` names it in errors (e.g. "file.safetensors: 'w'").
Array to_array(const RawTensor& t, const std::string& what = "tensor");
// Encodes an Array's values as `type`: floats round to nearest even, integers must be integral
// and in range (else mn::Error naming `what` and the element index).
RawTensor from_array(const Array& a, ElemType type, const std::string& what = "tensor");
inline RawTensor from_array(const Array& a) { return from_array(a, elem_type_for(a.dtype)); }

// ---------------------------------------------------------------------------------------------
// IDX (the MNIST format): magic 00 00 <type> <rank>, rank big-endian u32 dimensions, then
// big-endian elements. Files starting with the gzip magic are gunzipped transparently.

// With max_rows, only the first max_rows entries along the first dimension are read (the rest
// of the file is neither read nor decompressed) and the shape says how many were.
RawTensor read_idx(const std::filesystem::path& path,
                   std::optional<int64_t> max_rows = std::nullopt);
// The element type and the declared shape, from the header alone.
struct IdxInfo {
  ElemType type = ElemType::u8;
  Shape shape;
};
IdxInfo read_idx_info(const std::filesystem::path& path);
// Writes `t` as IDX (gzip-compressed when the path ends in ".gz"), atomically.
void write_idx(const std::filesystem::path& path, const RawTensor& t);

// ---------------------------------------------------------------------------------------------
// Data sets held in memory.

struct Dataset {
  Shape sample_shape;           // shape of one input, e.g. {784} or {1, 28, 28}
  std::vector<float> inputs;    // size() * sample_numel() values, sample-major
  std::vector<int32_t> labels;  // one class index per sample
  std::vector<std::string> class_names;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t sample_numel() const { return mn::numel(sample_shape); }
  Shape inputs_shape() const;  // {size(), sample_shape...}
  // Samples [begin, begin + count), e.g. a quick subset for a test run.
  Dataset slice(int64_t begin, int64_t count) const;
  // Checks that sizes agree and labels index class_names; throws mn::Error.
  void validate() const;
};

enum class ImageLayout { flat, nchw };  // [N, H*W] or [N, 1, H, W]
enum class Split { train, test };

// Loads an MNIST-format pair: u8 images [N, H, W] and u8 labels [N]. Pixels map to [0, 1].
// With max_samples, only the first max_samples pairs are read.
Dataset load_idx_images(const std::filesystem::path& images, const std::filesystem::path& labels,
                        ImageLayout layout, std::vector<std::string> class_names,
                        std::optional<int64_t> max_samples = std::nullopt);

// Where Fashion-MNIST is looked for: `dir` when given, else $MN_FASHION_MNIST_DIR, else the
// Debian package dataset-fashion-mnist's /usr/share/datasets/fashion-mnist.
std::filesystem::path fashion_mnist_dir(const std::filesystem::path& dir = {});
const std::vector<std::string>& fashion_mnist_classes();
// Throws FormatError naming the missing file and the package to install when it is absent.
Dataset load_fashion_mnist(Split split, ImageLayout layout = ImageLayout::flat,
                           const std::filesystem::path& dir = {},
                           std::optional<int64_t> max_samples = std::nullopt);

// ---------------------------------------------------------------------------------------------
// safetensors: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data section that the offsets index (contiguous, no gaps, no overlaps).

struct SafetensorsEntry {
  std::string name;
  ElemType type = ElemType::f32;
  Shape shape;
  uint64_t begin = 0;  // offsets inside the data section
  uint64_t end = 0;
};

// Reads and validates the header on construction; tensor data is read on demand.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path);
  // Parses a file image held in memory; `name` stands for the file in error messages.
  static SafetensorsReader from_bytes(std::vector<uint8_t> bytes, std::string name = "<memory>");
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;

  const std::map<std::string, std::string>& metadata() const;
  const std::vector<SafetensorsEntry>& entries() const;  // in data-section order
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // FormatError if absent
  RawTensor raw(const std::string& name) const;
  Array array(const std::string& name) const;

 private:
  SafetensorsReader();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tensor to be written; `bytes` must hold numel(shape) * elem_type_size(type) bytes.
struct TensorView {
  std::string name;
  ElemType type = ElemType::f32;
  Shape shape;
  std::span<const uint8_t> bytes;
};
inline TensorView view(std::string name, const RawTensor& t) {
  return {std::move(name), t.type, t.shape, t.bytes};
}

// Writes tensors in the given order, atomically (temporary file in the same directory, fsync,
// rename): a failure or crash leaves either the old file or the complete new one.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same, with each tensor's bytes produced when written: fill(i, out) stores tensor i's
// numel * elem_type_size bytes into `out`, so only one tensor is held at a time. The views'
// `bytes` may be left empty.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(size_t, std::span<uint8_t>)>& fill);
// Arrays are written in their own dtype (see elem_type_for).
void save_safetensors(const std::filesystem::path& path, const std::map<std::string, Array>& arrays,
                      const std::map<std::string, std::string>& metadata = {});
std::map<std::string, Array> load_safetensors(const std::filesystem::path& path);

// ---------------------------------------------------------------------------------------------
// Batches.

struct Batch {
  int64_t epoch = 0;
  int64_t step = 0;    // index of the batch inside its epoch
  Shape inputs_shape;  // {size(), sample_shape...}
  std::vector<float> inputs;
  std::vector<int32_t> labels;
  std::vector<int64_t> indices;  // the data set rows, in batch order

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  Array inputs_array() const;  // f32
  Array labels_array() const;  // i32
};

struct DataLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;       // the order of epoch e is a pure function of (seed, e)
  bool drop_last = false;  // drop the last partial batch of each epoch
  int64_t prefetch = 2;    // batches prepared ahead on a background thread; 0 = on next()
  // Runs on each batch as it is built (on the prefetch thread when there is one), e.g. for
  // augmentation or normalization. An exception it throws reaches the caller of next().
  std::function<void(Batch&)> transform;
};

// An endless stream of batches, epoch after epoch; position() says which comes next, and
// seek() restarts the stream exactly there (for resuming a training run).
class DataLoader {
 public:
  struct Position {
    int64_t epoch = 0;
    int64_t step = 0;
    bool operator==(const Position&) const = default;
  };

  DataLoader(std::shared_ptr<const Dataset> data, DataLoaderOptions options = {});
  ~DataLoader();  // stops and joins the prefetch thread, even mid-epoch
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const;
  Position position() const;
  // The next batch. After a failure (a transform threw) the same exception is raised again
  // until seek() restarts the stream.
  Batch next();
  void seek(int64_t epoch, int64_t step = 0);
  // The sample order of `epoch` (the identity when shuffle is off).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const Dataset& dataset() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mn
