// Columns of samples and the data sets made of them (arrays, .npy files, safetensors).
#include <cstring>
#include <string>

#include <meganeura/error.h>
#include <meganeura/tensor_data.h>

#include "ir/quoted_list.h"

namespace mn {

size_t Column::row_bytes() const {
  return static_cast<size_t>(numel(sample_shape())) * dtype_size(dtype);
}

Array Column::to_array() const {
  RawTensor t;
  t.type = elem_type_for(dtype);
  t.shape = shape;
  t.bytes.resize(bytes.size());
  std::memcpy(t.bytes.data(), bytes.data(), bytes.size());
  Array a = mn::to_array(t, "column");
  a.dtype = dtype;
  return a;
}

Column Column::from_array(const Array& a, std::optional<DType> dtype, const std::string& what) {
  Column c;
  c.dtype = dtype.value_or(a.dtype);
  c.shape = a.shape;
  const RawTensor t = mn::from_array(a, elem_type_for(c.dtype), what);
  c.bytes.resize(t.bytes.size());
  std::memcpy(c.bytes.data(), t.bytes.data(), t.bytes.size());
  return c;
}

Column Column::from_raw(const RawTensor& t, const std::string& what) {
  Column c;
  c.dtype = array_dtype_for(t.type);
  c.shape = t.shape;
  const size_t w = elem_type_size(t.type);
  if (t.bytes.size() != static_cast<size_t>(t.numel()) * w) {
    throw FormatError(what + ": " + std::to_string(t.bytes.size()) + " bytes do not hold shape " +
                      shape_str(t.shape) + " of " + elem_type_name(t.type));
  }
  if (t.type == elem_type_for(c.dtype)) {  // the bytes are the column's as they are
    c.bytes.resize(t.bytes.size());
    std::memcpy(c.bytes.data(), t.bytes.data(), t.bytes.size());
    return c;
  }
  // Converted a chunk at a time, so a large file never has a double per element in memory.
  const int64_t n = t.numel();
  constexpr int64_t kChunk = int64_t{1} << 20;
  const ElemType out_type = elem_type_for(c.dtype);
  c.bytes.resize(static_cast<size_t>(n) * dtype_size(c.dtype));
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    RawTensor part;
    part.type = t.type;
    part.shape = {count};
    part.bytes.assign(t.bytes.begin() + static_cast<ptrdiff_t>(begin * w),
                      t.bytes.begin() + static_cast<ptrdiff_t>((begin + count) * w));
    const std::string where = what + " (elements from " + std::to_string(begin) + ")";
    const RawTensor out = mn::from_array(mn::to_array(part, where), out_type, where);
    std::memcpy(c.bytes.data() + begin * dtype_size(c.dtype), out.bytes.data(), out.bytes.size());
  }
  return c;
}

void TensorDataset::add(const std::string& name, Column column) {
  if (name.empty()) throw Error("TensorDataset::add: a column needs a name");
  if (columns_.count(name)) throw Error("TensorDataset::add: column '" + name + "' exists");
  if (column.shape.empty()) {
    throw ShapeError("TensorDataset::add: column '" + name +
                     "' is 0-d; a column's first dimension counts its samples");
  }
  if (column.bytes.size() != static_cast<size_t>(numel(column.shape)) * dtype_size(column.dtype)) {
    throw Error("TensorDataset::add: column '" + name + "' has " +
                std::to_string(column.bytes.size()) + " bytes for " + dtype_name(column.dtype) +
                shape_str(column.shape));
  }
  if (!columns_.empty() && column.rows() != rows_) {
    const auto& [first, c] = *columns_.begin();
    throw ShapeError("TensorDataset::add: column '" + name + "' has " +
                     std::to_string(column.rows()) + " samples, column '" + first + "' has " +
                     std::to_string(rows_));
  }
  rows_ = column.rows();
  columns_.emplace(name, std::move(column));
}

void TensorDataset::add(const std::string& name, const Array& values, std::optional<DType> dtype) {
  add(name, Column::from_array(values, dtype, "column '" + name + "'"));
}

TensorDataset TensorDataset::from_npy(const std::map<std::string, std::filesystem::path>& files) {
  TensorDataset d;
  for (const auto& [name, path] : files) {
    try {
      d.add(name, Column::from_raw(read_npy(path), path.string()));
    } catch (const ShapeError& e) {
      throw ShapeError(path.string() + ": " + e.what());
    }
  }
  return d;
}

TensorDataset TensorDataset::from_safetensors(const std::filesystem::path& path,
                                              const std::vector<std::string>& names) {
  SafetensorsReader reader(path);
  std::vector<std::string> wanted = names;
  if (wanted.empty()) {
    for (const SafetensorsEntry& e : reader.entries()) wanted.push_back(e.name);
  }
  TensorDataset d;
  for (const std::string& name : wanted) {
    try {
      d.add(name, Column::from_raw(reader.raw(name), path.string() + ": '" + name + "'"));
    } catch (const ShapeError& e) {
      throw ShapeError(path.string() + ": " + e.what());
    }
  }
  return d;
}

TensorDataset TensorDataset::from_dataset(const Dataset& data, const std::string& inputs,
                                          const std::string& labels) {
  data.validate();
  Column x;
  x.dtype = DType::f32;
  x.shape = data.inputs_shape();
  x.bytes.resize(data.inputs.size() * sizeof(float));
  std::memcpy(x.bytes.data(), data.inputs.data(), x.bytes.size());
  Column y;
  y.dtype = DType::i32;
  y.shape = {data.size()};
  y.bytes.resize(data.labels.size() * sizeof(int32_t));
  std::memcpy(y.bytes.data(), data.labels.data(), y.bytes.size());
  TensorDataset d;
  d.add(inputs, std::move(x));
  d.add(labels, std::move(y));
  return d;
}

const Column& TensorDataset::column(const std::string& name) const {
  auto it = columns_.find(name);
  if (it == columns_.end()) {
    throw Error("TensorDataset: no column '" + name + "' (have: " +
                (columns_.empty() ? "none" : quoted_list(names())) + ")");
  }
  return it->second;
}

std::vector<std::string> TensorDataset::names() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : columns_) out.push_back(name);
  return out;
}

TensorDataset TensorDataset::slice(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin > size() || count > size() - begin) {
    throw Error("TensorDataset::slice: samples [" + std::to_string(begin) + ", " +
                std::to_string(begin + count) + ") are outside the " + std::to_string(size()) +
                " samples");
  }
  TensorDataset out;
  for (const auto& [name, c] : columns_) {
    Column part;
    part.dtype = c.dtype;
    part.shape = c.shape;
    part.shape[0] = count;
    const size_t w = c.row_bytes();
    part.bytes.assign(c.bytes.begin() + static_cast<ptrdiff_t>(begin * w),
                      c.bytes.begin() + static_cast<ptrdiff_t>((begin + count) * w));
    out.add(name, std::move(part));
  }
  return out;
}

}  // namespace mn
