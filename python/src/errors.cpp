// mn::Error and its kinds as Python exceptions carrying the C++ message. Each also derives
// from the built-in exception a Python user would catch for it (ValueError for shapes,
// IndexError for indices, OSError for files).
#include <meganeura/distributed.h>
#include <meganeura/error.h>

#include "bindings.h"

namespace mn::python {

namespace {

// Returns a new reference the module never gives back (exceptions live as long as the process).
PyObject* new_exception(py::module_& m, const char* name, const char* doc, py::tuple bases) {
  const std::string qualified = "meganeura." + std::string(name);
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

}  // namespace

void bind_errors(py::module_& m) {
  static PyObject *error, *shape_error, *index_error, *format_error, *device_error,
      *distributed_error;
  error = new_exception(m, "Error",
                        "A failure of meganeura; the message says what was wrong and where.",
                        py::make_tuple(py::handle(PyExc_RuntimeError)));
  shape_error = new_exception(m, "ShapeError", "An op's inputs have shapes or dtypes it refuses.",
                              py::make_tuple(py::handle(error), py::handle(PyExc_ValueError)));
  index_error = new_exception(m, "IndexError", "An index outside its range (take, targets...).",
                              py::make_tuple(py::handle(error), py::handle(PyExc_IndexError)));
  format_error = new_exception(m, "FormatError", "A file is malformed or missing.",
                               py::make_tuple(py::handle(error), py::handle(PyExc_OSError)));
  device_error = new_exception(m, "DeviceError",
                               "The GPU layer failed: no device, a Vulkan call, a shader.",
                               py::make_tuple(py::handle(error)));
  distributed_error = new_exception(
      m, "DistributedError",
      "A collective of a data-parallel job did not complete: another process died, stopped "
      "taking part, or disagrees on what it sends.",
      py::make_tuple(py::handle(error)));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(shape_error, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(index_error, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(format_error, e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(device_error, e.what());
    } catch (const DistributedError& e) {
      PyErr_SetString(distributed_error, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error, e.what());
    }
  });
}

}  // namespace mn::python
