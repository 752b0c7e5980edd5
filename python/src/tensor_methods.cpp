// Python operators and the common ops as Tensor methods (x @ w + b, x.reshape(-1, 10),
// x.sum(axis=1)), each the same op as the module's function.
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "bindings.h"

namespace mn::python {

namespace {

using Binary = Tensor (*)(Tensor, Tensor);

// self OP other and, reflected, other OP self.
void bind_operator(py::class_<Tensor>& t, const char* name, const char* reflected, Binary f) {
  t.def(
      name,
      [f, name](const py::object& self, const py::object& other) {
        auto [a, b] = operands(self, other, name);
        return f(a, b);
      },
      py::is_operator(), py::keep_alive<0, 1>());
  if (reflected) {
    t.def(
        reflected,
        [f, reflected](const py::object& self, const py::object& other) {
          auto [a, b] = operands(other, self, reflected);
          return f(a, b);
        },
        py::is_operator(), py::keep_alive<0, 1>());
  }
}

// Shape arguments given as x.reshape(2, 3) or x.reshape((2, 3)).
std::vector<int64_t> dims_of(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) {
    return args[0].cast<std::vector<int64_t>>();
  }
  return args.cast<std::vector<int64_t>>();
}

// x[index] with NumPy's basic indexing: ints (the axis dropped), slices with a positive step,
// one Ellipsis and None (a new axis). Anything else (arrays, negative steps) is an mn::Error.
Tensor index(Tensor x, const py::object& key) {
  py::tuple items = py::isinstance<py::tuple>(key) ? key.cast<py::tuple>() : py::make_tuple(key);
  int64_t consumed = 0;  // items that index an axis of x
  for (const auto& item : items) {
    if (!item.is_none() && !py::isinstance<py::ellipsis>(item)) ++consumed;
  }
  if (consumed > x.rank()) {
    throw Error("Tensor index: " + std::to_string(consumed) + " indices for a tensor of rank " +
                std::to_string(x.rank()));
  }
  int64_t axis = 0;
  std::vector<int64_t> dropped;  // axes of the result indexed by an int, removed at the end
  bool ellipsis = false;
  for (const auto& item : items) {
    if (py::isinstance<py::ellipsis>(item)) {
      if (ellipsis) throw Error("Tensor index: more than one Ellipsis");
      ellipsis = true;
      axis += x.rank() - consumed;
    } else if (item.is_none()) {
      x = unsqueeze(x, axis++);
    } else if (py::isinstance<py::int_>(item)) {
      const int64_t dim = x.shape()[static_cast<size_t>(axis)];
      int64_t i = item.cast<int64_t>();
      if (i < -dim || i >= dim) {
        throw IndexError("Tensor index: " + std::to_string(i) + " is out of range for axis " +
                         std::to_string(axis) + " of size " + std::to_string(dim));
      }
      if (i < 0) i += dim;
      x = slice(x, axis, i, i + 1);
      dropped.push_back(axis++);
    } else if (py::isinstance<py::slice>(item)) {
      const int64_t dim = x.shape()[static_cast<size_t>(axis)];
      py::ssize_t start = 0, stop = 0, step = 0, length = 0;
      if (!item.cast<py::slice>().compute(dim, &start, &stop, &step, &length)) {
        throw py::error_already_set();
      }
      if (step < 1) throw Error("Tensor index: slices with a negative step are not supported");
      x = slice(x, axis++, start, stop, step);
    } else {
      throw Error("Tensor index: expected ints, slices, None or ..., got " +
                  py::repr(item).cast<std::string>());
    }
  }
  return dropped.empty() ? x : squeeze(x, dropped);
}

}  // namespace

void bind_tensor_methods(py::module_& m) {
  auto t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  constexpr auto keep = py::keep_alive<0, 1>();
  // NumPy defers to the reflected operators (array / tensor is a graph op, not an object
  // array of tensors).
  t.attr("__array_ufunc__") = py::none();
  bind_operator(t, "__add__", "__radd__", &add);
  bind_operator(t, "__sub__", "__rsub__", &sub);
  bind_operator(t, "__mul__", "__rmul__", &mul);
  bind_operator(t, "__truediv__", "__rtruediv__", &div);
  bind_operator(t, "__pow__", "__rpow__", &pow);
  bind_operator(t, "__lt__", nullptr, &lt);
  bind_operator(t, "__le__", nullptr, &le);
  bind_operator(t, "__gt__", nullptr, &gt);
  bind_operator(t, "__ge__", nullptr, &ge);
  t.def("__matmul__", [](Tensor a, Tensor b) { return matmul(a, b); }, py::is_operator(), keep);
  t.def("__neg__", [](Tensor a) { return neg(a); }, keep);
  t.def("__getitem__", &index, py::arg("index"), keep);
  t.def("__abs__", [](Tensor a) { return abs(a); }, keep);

  t.def("reshape", [](Tensor x, py::args shape) { return reshape(x, dims_of(shape)); }, keep);
  t.def("permute", [](Tensor x, py::args dims) { return permute(x, dims_of(dims)); }, keep);
  t.def("transpose", &transpose, py::arg("dim0") = -2, py::arg("dim1") = -1, keep);
  // A property cannot take keep_alive itself (pybind11 3 refuses it); its getter can.
  t.def_property_readonly("T", py::cpp_function([](Tensor x) { return transpose(x); }, keep));
  t.def("unsqueeze", &unsqueeze, py::arg("axis"), keep);
  t.def(
      "squeeze", [](Tensor x, const py::object& axis) { return squeeze(x, to_axes(axis)); },
      py::arg("axis") = py::none(), keep);
  t.def(
      "flatten",
      [](Tensor x, int64_t start_dim) {
        const int start = normalize_axis(start_dim, x.rank(), "Tensor.flatten");
        Shape shape(x.shape().begin(), x.shape().begin() + start);
        shape.push_back(-1);
        return reshape(x, shape);
      },
      py::arg("start_dim") = 0, keep);
  t.def(
      "astype", [](Tensor x, const py::object& dtype) { return cast(x, to_dtype(dtype, "astype")); },
      py::arg("dtype"), keep);

  using Reduce = Tensor (*)(Tensor, std::vector<int64_t>, bool);
  const std::pair<const char*, Reduce> reductions[] = {
      {"sum", &sum}, {"mean", &mean}, {"max", &max}, {"min", &min}};
  for (const auto& [name, f] : reductions) {
    t.def(
        name,
        [f = f](Tensor x, const py::object& axis, bool keepdims) {
          return f(x, to_axes(axis), keepdims);
        },
        py::arg("axis") = py::none(), py::arg("keepdims") = false, keep);
  }
  t.def("argmax", &argmax, py::arg("axis"), py::arg("keepdims") = false, keep);
  t.def("softmax", &softmax, py::arg("axis") = -1, keep);
  t.def("log_softmax", &log_softmax, py::arg("axis") = -1, keep);

  using Unary = Tensor (*)(Tensor);
  const std::pair<const char*, Unary> unary[] = {
      {"exp", &exp},         {"log", &log},   {"sqrt", &sqrt}, {"tanh", &tanh},
      {"sigmoid", &sigmoid}, {"relu", &relu}, {"abs", &abs}};
  for (const auto& [name, f] : unary) t.def(name, f, keep);
}

}  // namespace mn::python
