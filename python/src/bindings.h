#pragma once
// Shared pieces of the Python bindings: one bind_* function per concept (each in its own file)
// and the conversions between NumPy arrays and the library's arrays, shapes and dtypes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <meganeura/array.h>
#include <meganeura/dtype.h>
#include <meganeura/graph.h>

namespace mn::python {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_graph(py::module_& m);
void bind_ops(py::module_& m);
void bind_tensor_methods(py::module_& m);
void bind_session(py::module_& m);
void bind_optim(py::module_& m, py::module_& optim);
void bind_nn(py::module_& nn);
void bind_vision(py::module_& vision);
void bind_data(py::module_& data);
void bind_reference(py::module_& reference);
void bind_lm(py::module_& lm);
void bind_trainer(py::module_& m, py::module_& data);
void bind_onnx(py::module_& m);
void bind_distributed(py::module_& dist);

// A dtype given as mn.DType, its name ("f32", "bf16"), NumPy's name ("float32", "int32") or a
// NumPy dtype. mn::Error naming `where` and the value for anything else.
DType to_dtype(const py::handle& value, const std::string& where);
// NumPy's dtype for arrays handed out of a tensor of dtype `t` (16-bit floats widen to f32).
py::dtype numpy_dtype(DType t);

// Axes given as None (every axis), an int or a sequence of ints.
std::vector<int64_t> to_axes(const py::handle& value);
// A pair given as one int or two (kernel sizes, strides, paddings).
std::array<int64_t, 2> to_pair(const py::handle& value, const std::string& where);

// A NumPy array (or anything np.asarray takes) as an Array of dtype `dtype` (or the array's own
// when unset: float64 becomes f32, int64 i32 after a range check). Integers out of the dtype's
// range and non-integral values for an integer dtype are mn::Errors naming `where`.
Array to_array(const py::handle& value, std::optional<DType> dtype, const std::string& where);
// An Array as a NumPy array of numpy_dtype(a.dtype).
py::array to_numpy(const Array& a);
// A vector moved into a NumPy array of `shape` without a copy.
template <class T>
py::array_t<T> adopt_vector(std::vector<T>&& values, const Shape& shape);

// Tensors as a Python list, each keeping `owner` (a tensor or graph of theirs) alive: a Tensor
// points at its Graph without owning it. Functions returning one Tensor use keep_alive<0, 1>.
py::list tensor_list(const std::vector<Tensor>& tensors, const py::handle& owner);

// The two operands of a binary op, at least one a Tensor: numbers become scalar constants of
// the tensor's dtype, arrays constants (mn::Error naming `op` otherwise).
std::pair<Tensor, Tensor> operands(const py::object& a, const py::object& b, const std::string& op);

// "(2, 3)" as NumPy prints shapes, for messages.
std::string shape_tuple(const std::vector<py::ssize_t>& shape);

}  // namespace mn::python

#include "bindings_impl.h"
