// Conversions between Python values (NumPy arrays, dtype names, axes) and the library's types.
#include <cmath>
#include <limits>

#include "bindings.h"

namespace mn::python {

namespace {

// NumPy's dtype names for the library's dtypes.
std::optional<DType> from_numpy_name(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "uint32") return DType::u32;
  return std::nullopt;
}

std::string py_repr(const py::handle& value) { return py::repr(value).cast<std::string>(); }

// The integer range of an integer dtype.
std::pair<double, double> integer_range(DType t) {
  if (t == DType::u32) return {0.0, static_cast<double>(std::numeric_limits<uint32_t>::max())};
  return {static_cast<double>(std::numeric_limits<int32_t>::min()),
          static_cast<double>(std::numeric_limits<int32_t>::max())};
}

}  // namespace

DType to_dtype(const py::handle& value, const std::string& where) {
  if (py::isinstance<DType>(value)) return value.cast<DType>();
  if (py::isinstance<py::str>(value)) {
    const auto name = value.cast<std::string>();
    if (auto t = from_numpy_name(name)) return *t;
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u32}) {
      if (name == dtype_name(t)) return t;
    }
    throw Error(where + ": unknown dtype '" + name +
                "', expected one of f32, f16, bf16, i32, u32 (or NumPy's float32, float16, "
                "int32, uint32)");
  }
  if (py::isinstance<py::dtype>(value) || py::hasattr(value, "dtype") ||
      py::isinstance<py::type>(value)) {
    py::dtype dt = py::isinstance<py::dtype>(value) ? py::reinterpret_borrow<py::dtype>(value)
                                                    : py::dtype::from_args(py::reinterpret_borrow<py::object>(value));
    const auto name = py::str(dt.attr("name")).cast<std::string>();
    if (auto t = from_numpy_name(name)) return *t;
    throw Error(where + ": NumPy dtype " + name +
                " has no counterpart, expected float32, float16, int32 or uint32");
  }
  throw Error(where + ": expected a dtype (mn.f32, 'bf16', numpy.float32), got " +
              py_repr(value));
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::i32: return py::dtype::of<int32_t>();
    case DType::u32: return py::dtype::of<uint32_t>();
    default: return py::dtype::of<float>();
  }
}

std::vector<int64_t> to_axes(const py::handle& value) {
  if (value.is_none()) return {};
  if (py::isinstance<py::int_>(value)) return {value.cast<int64_t>()};
  return value.cast<std::vector<int64_t>>();
}

std::array<int64_t, 2> to_pair(const py::handle& value, const std::string& where) {
  if (py::isinstance<py::int_>(value)) {
    const auto v = value.cast<int64_t>();
    return {v, v};
  }
  auto v = value.cast<std::vector<int64_t>>();
  if (v.size() != 2) {
    throw Error(where + ": expected an int or two ints, got " + py_repr(value));
  }
  return {v[0], v[1]};
}

std::string shape_tuple(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

Array to_array(const py::handle& value, std::optional<DType> dtype, const std::string& where) {
  const auto np = py::module_::import("numpy");
  py::array source = np.attr("asarray")(value);
  const char kind = source.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') {
    throw Error(where + ": expected numbers, got an array of dtype " +
                py::str(source.dtype()).cast<std::string>());
  }
  DType target;
  if (dtype) {
    target = *dtype;
  } else if (kind == 'f') {
    target = DType::f32;
  } else if (kind == 'u' && source.dtype().itemsize() == 4) {
    target = DType::u32;
  } else {
    target = DType::i32;
  }
  py::array_t<double, py::array::c_style | py::array::forcecast> values(source);
  Shape shape(values.shape(), values.shape() + values.ndim());
  const double* p = values.data();
  std::vector<double> data(p, p + values.size());
  if (!is_float(target)) {
    if (kind == 'f') {
      for (double v : data) {
        if (!std::isfinite(v) || v != std::floor(v)) {
          throw Error(where + ": the tensor holds integers (" + std::string(dtype_name(target)) +
                      "), got the non-integral value " + std::to_string(v));
        }
      }
    }
    const auto [lo, hi] = integer_range(target);
    for (double v : data) {
      if (v < lo || v > hi) {
        throw Error(where + ": " + std::to_string(static_cast<long long>(v)) +
                    " is outside the range of " + dtype_name(target));
      }
    }
  }
  return Array(std::move(shape), target, std::move(data));
}

py::array to_numpy(const Array& a) {
  std::vector<py::ssize_t> dims(a.shape.begin(), a.shape.end());
  auto convert = [&](auto type_tag) -> py::array {
    using T = decltype(type_tag);
    py::array_t<T> out(dims);
    auto* p = out.mutable_data();
    for (size_t i = 0; i < a.data.size(); ++i) p[i] = static_cast<T>(a.data[i]);
    return out;
  };
  if (a.dtype == DType::i32) return convert(int32_t{});
  if (a.dtype == DType::u32) return convert(uint32_t{});
  return convert(float{});
}

}  // namespace mn::python
