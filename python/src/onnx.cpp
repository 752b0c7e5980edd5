// ONNX import: a model file as a Graph, its initializers as trainable parameters.
#include <meganeura/onnx.h>
#include <meganeura/session.h>

#include "bindings.h"

namespace mn::python {

namespace {

py::dict value_info(const onnx::ValueInfo& v) {
  py::dict d;
  d["name"] = v.name;
  d["shape"] = py::tuple(py::cast(v.shape));
  d["type"] = elem_type_name(v.type);
  d["dtype"] = dtype_name(v.dtype);
  return d;
}

py::list value_infos(const std::vector<onnx::ValueInfo>& vs) {
  py::list out;
  for (const auto& v : vs) out.append(value_info(v));
  return out;
}

// A model input's value from an array, in the element type the model declares for it.
RawTensor input_value(const py::handle& value, ElemType type, const std::string& where) {
  const DType dtype = type == ElemType::f64 ? DType::f32 : array_dtype_for(type);
  return from_array(to_array(value, type == ElemType::i64 ? DType::i32 : dtype, where), type, where);
}

}  // namespace

void bind_onnx(py::module_& m) {
  static PyObject* unsupported = [&] {
    PyObject* error = m.attr("Error").ptr();
    PyObject* type = PyErr_NewExceptionWithDoc(
        "meganeura.onnx.UnsupportedError",
        "The model uses an op, attribute value or element type meganeura cannot import.", error,
        nullptr);
    if (!type) throw py::error_already_set();
    return type;
  }();
  auto onnx_m = m.def_submodule("onnx", "ONNX models as graphs.");
  onnx_m.attr("UnsupportedError") = py::handle(unsupported);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const onnx::UnsupportedError& e) {
      PyErr_SetString(unsupported, e.what());
    }
  });

  py::class_<onnx::ImportedModel>(onnx_m, "Model",
                                  "An imported ONNX model: its graph (inputs and outputs by the "
                                  "model's names, float initializers as parameters) and weights.")
      .def_property_readonly(
          "graph", [](onnx::ImportedModel& m) -> Graph& { return m.graph; },
          py::return_value_policy::reference_internal)
      .def_readonly("opset", &onnx::ImportedModel::opset)
      .def_readonly("producer", &onnx::ImportedModel::producer)
      .def_property_readonly("inputs", [](const onnx::ImportedModel& m) { return value_infos(m.inputs); })
      .def_property_readonly("outputs", [](const onnx::ImportedModel& m) { return value_infos(m.outputs); })
      .def_property_readonly("weights",
                             [](const onnx::ImportedModel& m) {
                               py::dict d;
                               for (const auto& [name, w] : m.weights) d[py::str(name)] = to_numpy(w);
                               return d;
                             })
      .def_readonly("specialized_inputs", &onnx::ImportedModel::specialized_inputs)
      .def_readonly("op_counts", &onnx::ImportedModel::op_counts)
      .def("load_weights", &onnx::ImportedModel::load_weights, py::arg("session"),
           "Writes every weight into the session's parameter of the same name.");

  onnx_m.def(
      "load",
      [](const std::filesystem::path& path, const py::dict& input_shapes, const py::dict& input_values,
         bool initializers_as_parameters) {
        onnx::ImportOptions o;
        o.initializers_as_parameters = initializers_as_parameters;
        for (auto [k, v] : input_shapes) o.input_shapes[py::str(k)] = v.cast<Shape>();
        const onnx::ModelFile file = onnx::ModelFile::read(path);
        if (!input_values.empty()) {
          const auto declared = file.inputs();
          for (auto [k, v] : input_values) {
            const std::string name = py::str(k);
            auto it = std::find_if(declared.begin(), declared.end(),
                                   [&](const auto& d) { return d.name == name; });
            if (it == declared.end()) throw Error("input_values names '" + name + "', which is not a model input");
            o.input_values[name] = input_value(v, it->type, "input_values['" + name + "']");
          }
        }
        return file.import(o);
      },
      py::arg("path"), py::arg("input_shapes") = py::dict(), py::arg("input_values") = py::dict(),
      py::arg("initializers_as_parameters") = true,
      "Imports an ONNX model file. input_shapes binds symbolic dimensions ({name: shape}); "
      "input_values gives inputs whose values decide shapes ({name: array}).");
  onnx_m.def("supported_ops", &onnx::supported_ops, "The ONNX op types the importer knows.");
}

}  // namespace mn::python
