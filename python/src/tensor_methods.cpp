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
  t.def("__abs__", [](Tensor a) { return abs(a); }, keep);

  t.def("reshape", [](Tensor x, py::args shape) { return reshape(x, dims_of(shape)); }, keep);
  t.def("permute", [](Tensor x, py::args dims) { return permute(x, dims_of(dims)); }, keep);
  t.def("transpose", &transpose, py::arg("dim0") = -2, py::arg("dim1") = -1, keep);
  t.def_property_readonly("T", [](Tensor x) { return transpose(x); }, keep);
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
