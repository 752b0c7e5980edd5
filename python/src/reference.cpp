// The CPU reference interpreter (float64): the oracle to check a session's values against.
#include <meganeura/reference.h>

#include "bindings.h"

namespace mn::python {

namespace {

py::array float64_array(const Array& a) {
  if (!is_float(a.dtype)) return to_numpy(a);
  std::vector<double> values = a.data;
  return adopt_vector(std::move(values), a.shape);
}

reference::Feeds feeds_of(const Graph& g, const py::dict& values) {
  reference::Feeds feeds;
  for (auto [key, value] : values) {
    const auto name = key.cast<std::string>();
    std::optional<DType> dtype;
    if (auto id = g.find_input(name)) dtype = g.node(*id).type.dtype;
    if (auto id = g.find_persistent(name)) dtype = g.node(*id).type.dtype;
    feeds[name] = to_array(value, dtype, "reference feed '" + name + "'");
  }
  return feeds;
}

}  // namespace

void bind_reference(py::module_& reference) {
  reference.def(
      "evaluate",
      [](const Graph& g, const py::dict& feeds) {
        py::dict out;
        for (const auto& [name, a] : reference::evaluate(g, feeds_of(g, feeds))) {
          out[py::str(name)] = float64_array(a);
        }
        return out;
      },
      py::arg("graph"), py::arg("feeds") = py::dict(),
      "Every output of `graph` computed on the CPU in float64 (feeds: inputs, and parameters "
      "in place of their initializers).");
  reference.def(
      "initial_parameters",
      [](const Graph& g) {
        py::dict out;
        for (const auto& [name, a] : reference::initial_parameters(g)) {
          out[py::str(name)] = float64_array(a);
        }
        return out;
      },
      py::arg("graph"), "The initial values of every parameter and state.");
}

}  // namespace mn::python
