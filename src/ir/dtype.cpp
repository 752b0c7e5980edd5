#include <meganeura/dtype.h>
#include <meganeura/error.h>

#include <sstream>

namespace mn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::u32:
      return "u32";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u32}) {
    if (name == dtype_name(t)) return t;
  }
  throw Error("unknown dtype '" + name + "' (expected f32, f16, bf16, i32 or u32)");
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16:
      return 2;
    default:
      return 4;
  }
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

bool is_half_float(DType t) { return t == DType::f16 || t == DType::bf16; }

namespace {
// The product of the dimensions, or false when it overflows int64.
bool product(std::span<const int64_t> shape, int64_t& n) {
  n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  return true;
}
}  // namespace

int64_t numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  if (!product(shape, n)) {
    throw ShapeError("shape " + shape_str(shape) +
                     ": the product of its dimensions overflows int64");
  }
  return n;
}

void check_tensor_size(const TensorType& t, const std::string& where) {
  for (int64_t d : t.shape) {
    if (d < 0) {  // e.g. a sum of dimensions that overflowed
      throw ShapeError(where + ": shape " + shape_str(t.shape) + " has a negative dimension");
    }
  }
  int64_t n = 1, bytes = 0;
  if (!product(t.shape, n)) {
    throw ShapeError(where + ": shape " + shape_str(t.shape) +
                     " has more elements than int64 counts (the product of its dimensions "
                     "overflows)");
  }
  if (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(t.dtype)), &bytes)) {
    throw ShapeError(where + ": " + t.str() + " holds " + std::to_string(n) +
                     " elements, whose size in bytes overflows int64");
  }
}

std::string shape_str(std::span<const int64_t> shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::vector<int64_t> contiguous_strides(std::span<const int64_t> shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

Shape broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b,
                       const std::string& where) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(where + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                       " do not broadcast (axis " + std::to_string(i) + ": " + std::to_string(da) +
                       " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_axis(int64_t axis, int rank, const std::string& where) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw ShapeError(where + ": axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(rank));
  }
  return static_cast<int>(a);
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

}  // namespace mn
