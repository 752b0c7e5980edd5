#pragma once
// Element types and shapes shared by every stage.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mn {

// f16/bf16 are storage types: arithmetic happens in f32 (or f64 in the reference).
// Comparison ops produce the float dtype of their operands holding 0 or 1.
enum class DType : uint8_t { f32, f16, bf16, i32, u32 };

const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // throws mn::Error for an unknown name
size_t dtype_size(DType t);
bool is_float(DType t);
bool is_half_float(DType t);  // f16 or bf16

using Shape = std::vector<int64_t>;

// The element count of `shape`; ShapeError when the product of the dimensions overflows int64.
int64_t numel(std::span<const int64_t> shape);
std::string shape_str(std::span<const int64_t> shape);  // "[2, 3]"
// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(std::span<const int64_t> shape);
// numpy broadcasting of two shapes; throws ShapeError naming `where` when incompatible.
Shape broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b,
                       const std::string& where = "broadcast");
// Normalizes a possibly negative axis against `rank`; throws ShapeError naming `where`.
int normalize_axis(int64_t axis, int rank, const std::string& where);

struct TensorType;
// ShapeError starting with `where` unless `t`'s dimensions are >= 0 and its element count and
// its size in bytes both fit int64 (every tensor of a graph passes this, so no later stage
// multiplies past int64).
void check_tensor_size(const TensorType& t, const std::string& where);

struct TensorType {
  Shape shape;
  DType dtype = DType::f32;
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const { return mn::numel(shape); }
  bool operator==(const TensorType&) const = default;
  std::string str() const;  // "f32[2, 3]"
};

}  // namespace mn
